"""The event logs `om simulate` writes for every recorded conversation, pinned by digest.

A restructuring must not change one byte of what the engine decides: each case runs the CLI's
own path (`simulation.run`, writing the events file) over a conversation in `tests/fixtures/` or
`examples/`, and compares the file's SHA-256 with the one recorded before the change.  A change
that is meant to alter behaviour updates a digest here, in the same commit, and says why.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from omstream.conversations.simulation import run
from omstream.schemas.config import load_om_config
from tests.helpers import LONG_THREAD, recorded_config

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo-conversation.jsonl"

_SCRIPTED = {"observation": {"model": "scripted/observer"}, "reflection": {"model": "scripted/reflector"}}


def _options(recording: str) -> dict:
    return recorded_config(LONG_THREAD / recording)["observationalMemory"]


def _merged(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


CASES = {
    # The two recordings of the original, in parity mode (tokenx, UTC).
    "long-thread-sync-parity": (LONG_THREAD / "conversation.jsonl", _options("expected-sync-timeline.txt"), True),
    "long-thread-async-parity": (LONG_THREAD / "conversation.jsonl", _options("expected-async-timeline.txt"), True),
    # omstream's own counting and rendering, with the extractors and hints the scripted models answer.
    "long-thread-async-tiktoken-title": (
        LONG_THREAD / "conversation.jsonl",
        _merged(_options("expected-async-timeline.txt"),
                {"tokenCounter": "tiktoken", "timeZone": "Europe/Paris", "observation": {"threadTitle": True}}),
        False),
    # The demo's conversation and thresholds, with the scripted models instead of the local one.
    "demo-scripted": (DEMO, _merged({"tokenCounter": "tiktoken", "observation": {
        "messageTokens": 500, "bufferTokens": 0.5, "bufferActivation": 0.8, "blockAfter": 1.2},
        "reflection": {"observationTokens": 4000}}, _SCRIPTED), False),
}

DIGESTS = {
    "long-thread-sync-parity": "0926077f988b479dc7214b295bfbe1ad370743578b425562801f39571e25a4c6",
    "long-thread-async-parity": "e90139ffb08245dbfc4360188ba3513f33d31cd1367baf998063a5544cd59da3",
    "long-thread-async-tiktoken-title": "b49a91d7ee4d470f7d41b0396a585de5c08b65eb9c2c4b62f6afece24ee6ee73",
    "demo-scripted": "ad75925a2a27fc3546b2b37f0660e51a69ed283d5a4dbe6cda4c1423784f30d5",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_event_log_is_byte_identical(case, tmp_path):
    conversation, options, parity = CASES[case]
    out = tmp_path / "events.jsonl"
    summary = run(conversation, load_om_config({"observationalMemory": options}), out=out,
                  parity=parity, measured_time=False, timeline=False)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    print(f"{case}: {len(out.read_bytes().splitlines())} events, sha256 {digest}, "
          f"{json.dumps(summary['modelCalls'])}")
    assert digest == DIGESTS[case]
