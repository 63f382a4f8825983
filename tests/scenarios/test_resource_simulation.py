"""`om simulate` of a conversation spread over two threads of one resource (spec §6.10).

The demo's messages, every other pair moved to a second thread of the same user
(examples/two-threads.jsonl, with examples/resource.toml), folded through the CLI's own path:
one memory `resource:alice`, observations covering one or both threads (two batches when both:
a small `maxTokensPerBatch`), a reflection, every message observed once, and the same bytes on
every run.  The digest pins what the engine decides for resource scope; a change meant to alter
it updates the digest here and says why."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omstream.conversations.simulation import run
from omstream.engine.prompting.groups import parse_groups
from omstream.engine.prompting.sections import section_bodies, shown_thread_id
from omstream.engine.rules.tokens import get_counter
from omstream.schemas.config import load_om_config
from omstream.settings import read_config_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONVERSATION = EXAMPLES / "two-threads.jsonl"
CONFIG = EXAMPLES / "resource.toml"
DIGEST = "a4ad07e1ac5f7c6cc8afd6149eb5dc80d49beb9bed81b92b15911749048bc6bd"


def _simulate(out: Path) -> tuple[dict, list[dict]]:
    summary = run(CONVERSATION, load_om_config(read_config_file(CONFIG)), out=out, parity=False,
                  measured_time=False, timeline=False)
    return summary, [json.loads(line) for line in out.read_text().splitlines()]


def test_two_threads_of_one_resource_simulate_into_one_memory(tmp_path):
    summary, events = _simulate(tmp_path / "a.jsonl")
    assert list(summary["memories"]) == ["resource:alice"]
    starts = [e for e in events if e["type"] == "data-om-observation-start"
              and e["data"]["operationType"] == "observation"]
    cycles: dict[str, list[str]] = {}
    for start in starts:  # one start per thread, the cycle's threads in each
        cycles.setdefault(start["data"]["cycleId"], []).append(start["threadId"])
        assert start["threadId"] in start["data"]["threadIds"]
    assert all(sorted(t) == sorted(next(s["data"]["threadIds"] for s in starts if s["data"]["cycleId"] == c))
               for c, t in cycles.items())
    assert {"trip-planning", "gear-questions"} in [set(t) for t in cycles.values()]
    assert summary["modelCalls"]["observer"] > len(cycles)  # a two-thread cycle sent two batches
    assert summary["modelCalls"]["reflector"] >= 1
    observed = [i for e in events if e["type"] == "data-om-observation-end" for i in e["data"]["observedMessageIds"]]
    assert len(observed) == len(set(observed))
    # Each thread's end reports the cycle's new observations, all threads together (1.31.0's
    # resource strategy, `cycleObservationTokens`): the same figure in every end of a cycle.
    count = get_counter(load_om_config(read_config_file(CONFIG)).token_counter).count
    ends: dict[str, list[dict]] = {}
    for e in events:
        if e["type"] == "data-om-observation-end" and e["data"]["operationType"] == "observation":
            ends.setdefault(e["data"]["cycleId"], []).append(e["data"])
    assert any(len(each) == 2 for each in ends.values())
    for each in ends.values():
        assert {d["observationTokens"] for d in each} == {sum(count(d["observations"] or "") for d in each)}
    _, again = _simulate(tmp_path / "b.jsonl")
    digest = hashlib.sha256((tmp_path / "a.jsonl").read_bytes()).hexdigest()
    print(f"{len(events)} events, sha256 {digest}, {json.dumps(summary['modelCalls'])}")
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()
    assert digest == DIGEST


def test_om_simulate_takes_a_file_of_several_threads_in_either_scope(tmp_path, capsys):
    from omstream.cli import main

    out = tmp_path / "events.jsonl"
    assert main(["simulate", str(CONVERSATION), "--config", str(CONFIG), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    summary = json.loads(err[err.index("{"):])
    assert list(summary["memories"]) == ["resource:alice"] and summary["rejected"] == []
    assert hashlib.sha256(out.read_bytes()).hexdigest() == DIGEST
    # In thread scope the same file is two memories, one a thread.
    thread_scope = tmp_path / "thread.toml"
    thread_scope.write_text(CONFIG.read_text().replace('scope = "resource"', 'scope = "thread"')
                            .replace("maxTokensPerBatch = 200", ""))
    assert main(["simulate", str(CONVERSATION), "--config", str(thread_scope), "--out", str(tmp_path / "t.jsonl")]) == 0
    err = capsys.readouterr().err
    summary = json.loads(err[err.index("{"):])
    assert sorted(summary["memories"]) == ["thread:gear-questions", "thread:trip-planning"]
    threads = {json.loads(line)["threadId"] for line in CONVERSATION.read_text().splitlines()}
    assert threads == {"gear-questions", "trip-planning"}


def test_with_retrieval_each_threads_observations_are_groups_of_its_own_messages(tmp_path):
    """The same file with `retrieval = true`: every observation of a thread is one group naming
    that thread's observed messages, reflections are `kind="reflection"` groups inside the
    threads' sections, and a second run writes the same bytes (ids drawn from the log)."""
    options = read_config_file(CONFIG)
    options["observationalMemory"]["retrieval"] = True
    config = load_om_config(options)
    out = tmp_path / "groups.jsonl"
    run(CONVERSATION, config, out=out, parity=False, measured_time=False, timeline=False)
    events = [json.loads(line) for line in out.read_text().splitlines()]
    thread_of = {e["data"]["message"]["id"]: e["data"]["message"]["threadId"]
                 for e in events if e["type"] == "om-message-accepted"}
    ends = [e for e in events if e["type"] == "data-om-observation-end"]
    observed = [e for e in ends if e["data"]["operationType"] == "observation" and e["data"]["observations"]]
    for end in observed:
        (group,) = parse_groups(end["data"]["observations"])
        assert {thread_of[group.start], thread_of[group.end]} == {end["threadId"]}
        assert {group.start, group.end} <= set(end["data"]["observedMessageIds"])
    reflections = [e["data"]["observations"] for e in ends if e["data"]["operationType"] == "reflection"]
    assert reflections and all(parse_groups(text) for text in reflections)
    for text in reflections:
        for shown, body in section_bodies(text):  # ids obscured: the default in resource scope
            assert all(g.kind == "reflection" and shown_thread_id(thread_of[g.start], True)
                       == shown_thread_id(thread_of[g.end], True) == shown for g in parse_groups(body))
    ids = [parse_groups(e["data"]["observations"])[0].id for e in observed]
    assert len(ids) == len(set(ids))
    run(CONVERSATION, config, out=tmp_path / "again.jsonl", parity=False, measured_time=False, timeline=False)
    assert (tmp_path / "again.jsonl").read_bytes() == out.read_bytes()
    print(f"{len(observed)} observation groups, {len(reflections)} reflections, "
          f"sha256 {hashlib.sha256(out.read_bytes()).hexdigest()}")
