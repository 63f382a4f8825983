"""`om export`, `om tail` and `om dlq show` in a namespace with a key, without a broker
(`MemoryRing`): records are opened; a shredded one is never written (export: counted and said in
the summary; tail: skipped); a dead letter is shown opened while its key lives, as it is after."""

from __future__ import annotations

import asyncio
import io
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

import orjson

from omstream.conversations.export import ExportSummary, Selection, choose, write_chosen
from omstream.crypto import Sealer
from omstream.crypto.opening import Opener, record_owner
from omstream.crypto.sealing import PLAIN, is_marked
from omstream.schemas.codec import encode
from omstream.schemas.control import StepStarted, ThreadDeleted
from omstream.settings import Settings
from tests.helpers import T0, message
from tests.unit.crypto.keys import MemoryRing
from tests.unit.projections.search.events import Memory


class StartedRing(MemoryRing):
    """A `MemoryRing` a `Sealer` can start and stop (what `sealer_of` gives a command)."""

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


def log_records() -> list[Any]:
    """Resource u1: threads a and b, messages and steps, then thread a deleted."""
    out: list[Any] = []
    for i in range(3):
        for thread in ("a", "b"):
            m = message(i, thread=thread)
            out += [m, StepStarted(thread_id=thread, resource_id="u1", step_number=i, at=m.created_at)]
    return [*out, ThreadDeleted(thread_id="a", resource_id="u1", at=T0)]


async def sealed_log(sealer: Sealer, records: list[Any], key: str) -> list[tuple[bytes, bytes, tuple[int, int]]]:
    """The records as `OmClient` sends them: content sealed under its owner's key."""
    out = []
    for offset, record in enumerate(records):
        value = encode(record)
        out.append((key.encode(), await sealer.seal(value, record_owner(orjson.loads(value), key)), (0, offset)))
    return out


def exported(rows, selection: Selection, opener: Opener) -> tuple[bytes, ExportSummary]:
    out = io.BytesIO()
    summary = ExportSummary(selection.key, selection.thread)
    write_chosen(rows, selection, opener, summary, out)
    return out.getvalue(), summary


async def test_export_opens_records_and_never_writes_a_shredded_one():
    records = log_records()
    sealer = Sealer(cast(Any, MemoryRing()))
    rows = await sealed_log(sealer, records, "resource:u1")
    assert all(is_marked(v) for _, v, _ in rows if b'"type"' not in v)  # every message sealed
    plain_rows = [(k, encode(r), p) for (k, _, p), r in zip(rows, records, strict=True)]
    selection = Selection("resource:u1", None)
    plain, plain_summary = exported(plain_rows, selection, Opener())
    # Opened, the export is the plain one, byte for byte.
    opened, summary = exported(rows, selection, Opener(sealer))
    assert opened == plain and summary.written == plain_summary.written == len(records)
    # Thread a deleted: its messages' key (its own in resource scope) is shredded.
    await sealer.shred("thread:resource:u1/a")
    after, summary = exported(rows, selection, Opener(sealer))
    assert summary.skipped == Counter({"shredded": 3}) and summary.written == len(records) - 3
    assert b'"a-m' not in after and after.count(b'"b-m') == 3
    assert "3 shredded" in summary.line()
    # The PLAIN path writes what `choose` gives, unchanged.
    assert plain == b"".join(encode(choose(k, v, p, selection)) + b"\n" for k, v, p in plain_rows)


async def test_a_thread_memory_deleted_exports_its_commands_only():
    sealer = Sealer(cast(Any, MemoryRing()))
    records = [r for r in log_records() if getattr(r, "thread_id", None) == "a"]
    rows = await sealed_log(sealer, records, "thread:a")
    await sealer.shred("thread:a")
    out, summary = exported(rows, Selection("thread:a", "a"), Opener(sealer))
    assert summary.skipped["shredded"] == 3 and summary.written == len(records) - 3
    assert all(orjson.loads(line)["type"] != "message" for line in out.splitlines())


@dataclass
class Record:
    offset: int
    value: bytes
    timestamp: int | None = None


class FakeConsumer:
    """The events topic's one partition: its records in one fetch, then stopped (as a consumer
    stopped elsewhere: `om tail` ends)."""

    def __init__(self, values: list[bytes]) -> None:
        self.values = values
        self.fetched = False

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def assign(self, parts) -> None:
        self.parts = parts

    async def end_offsets(self, parts):
        return {tp: len(self.values) for tp in parts}

    async def seek_to_beginning(self, tp) -> None:
        pass

    async def getmany(self, **options):
        from aiokafka.errors import ConsumerStoppedError

        if self.fetched:
            raise ConsumerStoppedError()
        self.fetched = True
        return {self.parts[0]: [Record(offset, value) for offset, value in enumerate(self.values)]}


async def test_tail_opens_events_and_skips_a_deleted_memorys(monkeypatch):
    import omstream.crypto.sealing
    import omstream.kafka
    import omstream.projections.follower
    from omstream.cli.tail import tail

    async def partitions_of(bootstrap, topics):
        return {topic: [0] for topic in topics}

    sealer = Sealer(cast(Any, StartedRing()))
    kept, gone = Memory("thread:k", "k"), Memory("thread:s", "s")
    events = [kept.message(0, "kept words"), gone.message(0, "gone words"), kept.titled("a title")]
    values = [await sealer.seal(encode(e), record_owner(orjson.loads(encode(e))), context=e.event_id.encode())
              for e in events]
    await sealer.shred("thread:s")
    monkeypatch.setattr(omstream.crypto.sealing, "sealer_of", lambda settings, repair=True: sealer)
    monkeypatch.setattr(omstream.kafka, "reader", lambda *args, **kwargs: FakeConsumer(values))
    monkeypatch.setattr(omstream.projections.follower, "partitions_of", partitions_of)
    out = io.StringIO()
    assert await tail(Settings(), thread=None, from_beginning=True, as_json=True, count=None, out=out) == 2
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["data"]["message"]["content"] == "kept words" and "omSealed" not in lines[0]
    assert lines[1]["data"]["newTitle"] == "a title"


def test_dlq_show_opens_a_sealed_record_while_its_key_lives(monkeypatch):
    import omstream.crypto.sealing
    from omstream.cli.dlq import opened_record

    sealer = Sealer(cast(Any, StartedRing()))
    m = message(0, thread="t9")
    raw = asyncio.run(sealer.seal(encode(m), "thread:t9"))
    monkeypatch.setattr(omstream.crypto.sealing, "sealer_of", lambda settings, repair=True: sealer)
    assert asyncio.run(opened_record(Settings(), raw, "thread:t9")) == (encode(m), None)
    asyncio.run(sealer.shred("thread:t9"))
    assert asyncio.run(opened_record(Settings(), raw, "thread:t9")) == (raw, "shredded")
    # No key configured: shown as it is, saying so; an unsealed record as it is.
    monkeypatch.setattr(omstream.crypto.sealing, "sealer_of", lambda settings, repair=True: PLAIN)
    assert asyncio.run(opened_record(Settings(), raw, "thread:t9")) == (raw, "no-key")
    assert asyncio.run(opened_record(Settings(), encode(m), "thread:t9")) == (encode(m), None)


async def test_a_sealed_record_read_without_a_key_is_passed_over_never_shown_as_text(caplog):
    sealer = Sealer(cast(Any, MemoryRing()))
    rows = await sealed_log(sealer, log_records(), "resource:u1")
    out, summary = exported(rows, Selection("resource:u1", None), Opener())
    assert summary.skipped == Counter({"no-key": 6}) and b"om1" not in out
    assert caplog.text.count("without a namespace key") == 1
