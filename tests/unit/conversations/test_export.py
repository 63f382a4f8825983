"""`om export`'s choice of records (pure), its argument errors, and `om produce` of its output."""

from __future__ import annotations

import asyncio
import base64
import os
from collections import Counter
from datetime import timedelta

import orjson
import pytest

from omstream.cli import main
from omstream.cli.conversations import produce_file
from omstream.conversations.export import ExportSummary, Selection, choose, refused_positions
from omstream.schemas.codec import encode
from omstream.schemas.control import ResourceDeleted, StepStarted, TurnEnded
from omstream.schemas.messages import Message
from tests.helpers import T0, message

LOG = "ns.log"


def letter(code: str, partition: int, offset: int, topic: str = LOG) -> bytes:
    """A dead letter in the worker's shape (`omstream.schemas.dead_letters.DeadLetter`)."""
    return orjson.dumps({"type": "dead-letter", "code": code, "reason": "r", "key": "thread:a",
                         "source": {"topic": topic, "partition": partition, "offset": offset},
                         "value": base64.b64encode(b"x").decode()})


def test_refused_positions_are_the_log_records_the_worker_did_not_fold():
    letters = [letter("invalid", 0, 3), letter("future-time", 1, 7), b"not json", None,
               letter("state-unreadable", 0, -1, topic="omstream-ns-state-changelog"),
               letter("invalid", 0, 4, topic="other.log"),
               letter("conflict", 0, 9)]  # folded: the fold refused part of it itself
    assert refused_positions(letters, LOG) == {(0, 3), (1, 7)}


def result_bytes() -> bytes:
    return orjson.dumps({"type": "model-result", "kind": "observe", "cycleId": "c", "memoryKey": "thread:a",
                         "threadId": "a", "requestHash": "h", "ok": True, "output": "x", "model": "m",
                         "startedAt": "2025-03-03T09:00:00Z", "completedAt": "2025-03-03T09:00:01Z"})


def test_choose_keeps_the_memorys_history_and_names_every_skip():
    selection = Selection("thread:a", "a", frozenset({(0, 5)}))
    m = message(0, thread="a")
    step = StepStarted(thread_id="a", step_number=0, at=T0)
    assert choose(b"thread:a", encode(m), (0, 1), selection) == m
    assert choose(b"thread:a", encode(step), (0, 2), selection) == step
    assert choose(b"thread:b", encode(message(0, thread="b")), (0, 3), selection) == "other-memory"
    assert choose(None, encode(m), (0, 3), selection) == "other-memory"
    assert choose(b"thread:a", b"{nope", (0, 4), selection) == "undecodable"
    assert choose(b"thread:a", encode(m), (0, 5), selection) == "dead-lettered"
    assert choose(b"thread:a", result_bytes(), (0, 6), selection) == "model-result"


def test_choose_in_resource_scope_keeps_the_thread_and_resource_wide_records():
    selection = Selection("resource:u1", "a")
    other = message(0, thread="b")
    wide = ResourceDeleted(resource_id="u1", at=T0)
    assert choose(b"resource:u1", encode(other), (0, 1), selection) == "other-thread"
    assert choose(b"resource:u1", encode(wide), (0, 2), selection) == wide
    assert choose(b"resource:u1", encode(other), (0, 3), Selection("resource:u1", None)) == other


def test_the_summary_line_counts_each_reason():
    summary = ExportSummary("thread:a", "a", written=12, skipped=Counter({"model-result": 3, "other-memory": 40}))
    assert summary.line() == "om export: 12 records of thread 'a'; skipped: 40 other-memory, 3 model-result"
    assert ExportSummary("resource:u1", None).line() == "om export: 0 records of memory 'resource:u1'; skipped: none"


def test_export_needs_a_thread_and_a_well_formed_version(tmp_path, capsys, monkeypatch):
    for name in [n for n in os.environ if n.startswith("OM_")]:
        monkeypatch.delenv(name)
    config = tmp_path / "om.toml"
    config.write_text("[omstream]\nnamespace = 'n'\n")
    assert main(["export", "--config", str(config)]) == 2
    assert "name the thread with --thread" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["export", "--thread", "a", "--version", "Bad Name", "--config", str(config)])
    assert exit_.value.code == 2
    assert "'Bad Name': use lower-case letters" in capsys.readouterr().err


class FakeClient:
    """Records what `produce_file` sends, in order."""

    sent: list = []

    def __init__(self, settings) -> None:
        FakeClient.sent = []

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        pass

    async def send_messages(self, messages):
        FakeClient.sent += list(messages)

    async def send_control(self, record):
        FakeClient.sent.append(record)


def test_produce_sends_markers_and_commands_in_their_place(tmp_path, monkeypatch):
    import omstream.client

    monkeypatch.setattr(omstream.client, "OmClient", FakeClient)
    records = [message(0, thread="a"), StepStarted(thread_id="a", resource_id="u1", step_number=0, at=T0),
               message(1, thread="a"), message(2, thread="a"),
               TurnEnded(thread_id="a", resource_id="u1", at=T0 + timedelta(seconds=70))]
    path = tmp_path / "conv.jsonl"
    path.write_bytes(b"".join(encode(r) + b"\n" for r in records))
    assert asyncio.run(produce_file(None, path)) == (5, 3)
    assert FakeClient.sent == records
    assert [type(r) for r in FakeClient.sent] == [Message, StepStarted, Message, Message, TurnEnded]
