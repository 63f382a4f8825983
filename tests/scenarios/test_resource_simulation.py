"""`om simulate` of a conversation spread over two threads of one resource (spec §6.10).

The demo's messages, every other pair moved to a second thread of the same user, folded through
the CLI's own path: one memory `resource:alice`, observations covering one or both threads (two
batches when both: a small `maxTokensPerBatch`), a reflection, every message observed once, and
the same bytes on every run.  The digest pins what the engine decides for resource scope; a change meant to alter it
updates the digest here and says why.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omstream.schemas.config import load_om_config
from omstream.simulation import run

CONVERSATION = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios" / "resource" / "two-threads.jsonl"
OPTIONS = {
    "scope": "resource", "tokenCounter": "tiktoken",
    "observation": {"model": "scripted/observer", "messageTokens": 250, "bufferTokens": False,
                    "maxTokensPerBatch": 200},
    "reflection": {"model": "scripted/reflector", "observationTokens": 500},
}
DIGEST = "116c2b7df34925caa91efda42463ea81e34c7213618d8c2ff7334ecfda0b4e31"


def _simulate(out: Path) -> tuple[dict, list[dict]]:
    summary = run(CONVERSATION, load_om_config({"observationalMemory": OPTIONS}), out=out, parity=False,
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
    _, again = _simulate(tmp_path / "b.jsonl")
    digest = hashlib.sha256((tmp_path / "a.jsonl").read_bytes()).hexdigest()
    print(f"{len(events)} events, sha256 {digest}, {json.dumps(summary['modelCalls'])}")
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()
    assert digest == DIGEST
