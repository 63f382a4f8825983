"""Conversation files with the log's own records (what `om export` writes), and how `om simulate`
feeds them: as given when they carry the agent loop, through `turns` when they are messages only."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from omstream.conversations.files import messages_of, read_conversation, turns
from omstream.conversations.simulation import driven_config, has_loop_markers, inputs_of, simulate
from omstream.engine.fold import EngineConfig
from omstream.schemas.codec import encode
from omstream.schemas.config import load_om_config
from omstream.schemas.control import ObserveRequested, StepStarted, ThreadPatched, TurnEnded
from omstream.schemas.messages import Message
from tests.helpers import T0, fold_inputs, message


def write_lines(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else orjson.dumps(line).decode()) + "\n"
                            for line in lines))
    return path


def step(thread: str, n: int, at_s: int = 0) -> StepStarted:
    return StepStarted(thread_id=thread, resource_id="u1", step_number=n, at=T0 + timedelta(seconds=at_s))


# --- reading ----------------------------------------------------------------------------------
def test_message_lines_and_the_logs_records_are_read_in_order(tmp_path):
    exported = [message(0, thread="a"), step("a", 0), message(1, thread="a"), step("a", 1, 31),
                TurnEnded(thread_id="a", resource_id="u1", at=T0 + timedelta(seconds=40)),
                ObserveRequested(thread_id="a", at=T0 + timedelta(seconds=41), request_id="r1")]
    path = write_lines(tmp_path / "conv.jsonl", [
        *(orjson.loads(encode(r)) for r in exported),
        # the simple form still reads: no type, no id
        {"threadId": "a", "role": "user", "content": "hi", "createdAt": "2025-03-03T09:05:00Z"},
        "",
        {"type": "thread-patched", "threadId": "a", "title": "Trip", "at": "2025-03-03T09:06:00Z"},
    ])
    records = read_conversation(path)
    assert records[:6] == exported
    assert isinstance(records[6], Message) and records[6].id == "a:7"  # its line number
    assert records[7] == ThreadPatched(thread_id="a", title="Trip", at=T0 + timedelta(minutes=6))
    assert messages_of(records) == [exported[0], exported[2], records[6]]


def test_a_model_result_line_is_refused_by_its_line(tmp_path):
    path = write_lines(tmp_path / "conv.jsonl", [orjson.loads(encode(message(0))),
                                                 {"type": "model-result", "cycleId": "c1"}])
    with pytest.raises(ValueError, match=r"conv\.jsonl:2: a model-result line is not history"):
        read_conversation(path)


@pytest.mark.parametrize(("line", "problem"), [
    ("not json", r":1: not JSON"),
    ("[1]", r":1: each line must be a JSON object"),
    ({"threadId": "a", "role": "user", "createdAt": "2025-03-03T09:00:00Z"}, r":1: Field required at content"),
    ({"type": "step-started", "threadId": "a", "at": "2025-03-03T09:00:00Z"},
     r":1: invalid step-started: stepNumber: Field required"),
    ({"type": "stepstarted", "threadId": "a"}, r":1: unknown record type 'stepstarted'; known: "),
])
def test_a_bad_line_is_named(tmp_path, line, problem):
    with pytest.raises(ValueError, match=problem):
        read_conversation(write_lines(tmp_path / "conv.jsonl", [line]))


# --- which inputs -----------------------------------------------------------------------------
def test_messages_alone_get_the_synthesized_agent_loop():
    messages = [message(i, thread="a") for i in range(4)]
    assert not has_loop_markers(messages)
    assert inputs_of(messages) == list(turns(messages))
    assert [type(r).__name__ for r in inputs_of(messages)] == [
        "Message", "StepStarted", "Message", "TurnEnded", "Message", "StepStarted", "Message", "TurnEnded"]


def test_a_command_among_messages_keeps_its_place_in_the_synthesized_loop():
    command = ObserveRequested(thread_id="a", at=T0 + timedelta(seconds=45))
    records = [message(0, thread="a"), message(1, thread="a"), command, message(2, thread="a")]
    assert not has_loop_markers(records)
    inputs = inputs_of(records)
    assert inputs.index(command) == 3  # after the reply, before the turn's end and the next user line
    assert [r for r in inputs if isinstance(r, Message)] == messages_of(records)


def test_records_with_the_agent_loop_are_fed_as_given():
    records = [message(0, thread="a"), step("a", 0), message(1, thread="a"), step("a", 1, 31)]
    assert has_loop_markers(records)
    assert inputs_of(records) == records  # no synthesized step 0 or turn end
    ended = [message(0, thread="a"), TurnEnded(thread_id="a", at=T0)]
    assert inputs_of(ended) == ended


# --- one semantics for both paths ---------------------------------------------------------------
def om_options(check: str, message_tokens: int = 300):
    return load_om_config({
        "observation": {"model": "scripted/observer", "messageTokens": message_tokens, "bufferTokens": False},
        "reflection": {"model": "scripted/reflector", "observationTokens": 400},
        "tokenCounter": "tokenx", "checkThresholdsAt": check})


def conversation() -> list[Message]:
    """Two interleaved threads, enough for several observations and a reflection each."""
    return [message(i, thread=t, words=40 + (i * 13) % 70) for i in range(24) for t in ("a", "b")]


def comparable(sim) -> list[dict]:
    return [e.model_dump(mode="json") for e in sim.events]


@pytest.mark.parametrize("check", ["auto", "step", "message"])
def test_a_file_with_the_markers_turns_makes_simulates_like_the_messages_alone(tmp_path, check):
    """The synthesized loop is exactly `turns` under `driven_config`: the file that spells it out
    (as an export of a thread driven that way would) writes the same events, byte for byte."""
    messages = conversation()
    plain = write_lines(tmp_path / "plain.jsonl", [orjson.loads(encode(m)) for m in messages])
    spelled = write_lines(tmp_path / "spelled.jsonl", [orjson.loads(encode(r)) for r in turns(messages)])
    om = om_options(check)
    expected = asyncio.run(simulate(read_conversation(plain), om))
    given = asyncio.run(simulate(read_conversation(spelled), driven_config(om)))
    assert any(e.type == "data-om-observation-end" for e in expected.events)
    assert comparable(given) == comparable(expected)
    assert [j.request_hash for j in given.jobs] == [j.request_hash for j in expected.jobs]


def test_given_markers_keep_the_configured_check_as_the_worker_does():
    """`auto` checks at every message until the first step: a given loop is folded with the
    options as they are (the worker's fold), not with the simulator's `step` default."""
    records = [message(0, thread="t1"), step("t1", 0), message(1, thread="t1"),
               TurnEnded(thread_id="t1", resource_id="u1", at=T0 + timedelta(seconds=40))]
    om = om_options("auto", message_tokens=100_000)  # no cycle: the fold alone is the oracle
    sim = asyncio.run(simulate(records, om))
    _, events, jobs, _ = fold_inputs(records, EngineConfig(om))
    assert not jobs
    assert comparable(sim) == [e.model_dump(mode="json") for e in events]
    statuses = [e.data.step_number for e in sim.events if e.type == "data-om-status"]
    assert statuses == [None, 0]  # the first message's own check, then step 0's
