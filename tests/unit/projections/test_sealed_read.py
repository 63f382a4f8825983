"""The read side in a namespace with a key, without a broker (`MemoryRing`): a projection fed
sealed events equals the one fed plain ones; events of a memory whose key was shredded are passed
over (before or after the feed read them); the store keeps the events sealed; under `PLAIN`
nothing changes, byte for byte; a deleted memory's text leaves the read model's and the search
index's files (text and embeddings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
import pytest

from omstream.crypto import CONTENT_FIELDS, Sealer
from omstream.crypto.opening import Opener, record_owner
from omstream.crypto.sealing import PLAIN, is_marked
from omstream.engine.fold import fold, new_state
from omstream.projections.feed import ProjectionFeed
from omstream.projections.follower import Batch
from omstream.projections.search.embedding.hashed import HashEmbedder
from omstream.projections.search.index import IndexProjection
from omstream.projections.search.sqlite_vec import SqliteVecIndex
from omstream.projections.store.store import ReadModelStore
from omstream.schemas.codec import encode
from omstream.schemas.control import StepStarted, ThreadDeleted
from omstream.settings import Settings
from tests.helpers import engine, message, scripted_result
from tests.unit.crypto.keys import MemoryRing
from tests.unit.projections.search.events import Memory, group
from tests.unit.projections.test_store import ENDS, SOURCE, memory_events, picture

SECRET = "locker code 4417 ZEBRA"


def records(events: list) -> list[tuple[int, bytes, int | None]]:
    """The events as the worker writes them: one input record each, a re-sent one in the middle."""
    out = [(0, encode(e.model_copy(update={"input_offset": i, "input_last": True})), 1_700_000_000_000 + i)
           for i, e in enumerate(events)]
    out.insert(20, (0, out[12][1], None))
    return [(offset, value, ts) for offset, (_, value, ts) in enumerate(out)]


def interleaved() -> list:
    sync = engine(300)
    streams = [memory_events("a", sync, 12), memory_events("b", engine(400, observation={
        "bufferTokens": 0.25, "bufferActivation": 0.8}), 12), memory_events("c", sync, 12, delete_at=6)]
    return [e for group_ in zip(*[s + [None] * (300 - len(s)) for s in streams], strict=True)
            for e in group_ if e is not None]


async def seal_all(sealer: Sealer, rows: list[tuple[int, bytes, int | None]], *,
                   shred: bool = True) -> list[tuple[int, bytes, int | None]]:
    """Each event sealed as the fold agent seals it (its owner's key, context = event id); a
    memory's key shredded right after its deletion event, as the worker does."""
    out = []
    for offset, value, ts in rows:
        data = orjson.loads(value)
        owner = record_owner(data)
        out.append((offset, await sealer.seal(value, owner, context=data["eventId"].encode()), ts))
        if shred and data["type"] == "om-memory-deleted":
            await sealer.shred(owner)
    return out


def batches_of(rows: list[tuple[int, bytes, int | None]], size: int = 7) -> list[Batch]:
    return [{0: rows[i:i + size]} for i in range(0, len(rows), size)]


def fed(batches: list[Batch], store: ReadModelStore | None = None, sealer: Sealer = PLAIN) -> ProjectionFeed:
    feed = ProjectionFeed(Settings(), store=store, sealer=sealer)
    feed._load(SOURCE, ENDS)
    for batch in batches:
        feed._apply_batch(batch)
    return feed


def new_sealer() -> Sealer:
    return Sealer(cast(Any, MemoryRing()))


@pytest.fixture(scope="module")
def plain_rows() -> list[tuple[int, bytes, int | None]]:
    return records(interleaved())


async def test_a_projection_fed_sealed_events_equals_the_one_fed_plain_ones(plain_rows, tmp_path):
    sealer = new_sealer()
    rows = await seal_all(sealer, plain_rows)
    assert sum(is_marked(v) for _, v, _ in rows) > len(rows) // 3  # the content events are sealed
    assert not any(b"[3] " in v for _, v, _ in rows if is_marked(v))  # a message's text is not in clear
    plain = picture(fed(batches_of(plain_rows)))
    # Thread c's events before its deletion are shredded: passed over, and the result is the same,
    # in memory and in a store, and read back from that store.
    memory = fed(batches_of(rows), sealer=sealer)
    assert picture(memory) == plain and memory.opener.passed["shredded"] > 0
    stored = fed(batches_of(rows), ReadModelStore(tmp_path / "rm.sqlite"), sealer)
    assert picture(stored) == plain
    # Sealed at rest: the rows are the topic's bytes, content events marked.
    kept = stored.store.events_since("thread:a", 0)
    assert kept and any(is_marked(value) for _, _, value in kept)
    assert {value for _, _, value in kept} <= {v for _, v, _ in rows}
    stored.store.close()
    back = fed([], ReadModelStore(tmp_path / "rm.sqlite"), sealer)
    assert picture(back) == plain
    back.store.close()


async def test_a_memory_shredded_after_the_feed_read_it_is_gone_from_replays_not_an_error(plain_rows, tmp_path):
    sealer = new_sealer()
    rows = await seal_all(sealer, plain_rows)
    feed = fed(batches_of(rows), ReadModelStore(tmp_path / "rm.sqlite"), sealer)
    assert [e.seq for e in feed.history.since("thread:a")]
    await sealer.shred("thread:a")  # deleted since; its deletion event not read yet
    # The kept rows with content no longer open: passed over; those without content stay.
    left = feed.history.since("thread:a")
    assert left and not any(e.type in CONTENT_FIELDS for e in left)
    assert [e.seq for e in feed.history.since("thread:b")] == [e.seq for e in fed(batches_of(plain_rows)).history.since(
        "thread:b")]
    # Read again from the topic (a rebuild), a's content events are passed over, its status kept.
    again = fed(batches_of(rows), sealer=sealer)
    assert not any(e.type in CONTENT_FIELDS for e in again.history.since("thread:a"))
    assert "thread:a" not in again.projection.threads or not again.projection.threads["a"].messages
    feed.store.close()


async def test_plain_is_byte_identical(plain_rows, tmp_path):
    assert all(Opener().open(v) is v for _, v, _ in plain_rows)
    feed = fed(batches_of(plain_rows), ReadModelStore(tmp_path / "rm.sqlite"))
    kept = {value for key in ("thread:a", "thread:b", "thread:c") for _, _, value in feed.store.events_since(key, 0)}
    assert kept <= {v for _, v, _ in plain_rows} and feed.opener.passed == {}
    feed.store.close()


async def test_a_tampered_event_is_passed_over_with_a_warning_and_no_content(plain_rows, caplog):
    sealer = new_sealer()
    rows = await seal_all(sealer, plain_rows, shred=False)
    # An envelope of memory a moved into an event of memory b: it does not authenticate there.
    a = next(v for _, v, _ in rows if is_marked(v) and b'"memoryKey":"thread:a"' in v
             and b'"om-message-accepted"' in v)
    b = next(v for _, v, _ in rows if is_marked(v) and b'"memoryKey":"thread:b"' in v
             and b'"om-message-accepted"' in v)
    moved = orjson.loads(b)
    moved["data"]["message"]["content"] = orjson.loads(a)["data"]["message"]["content"]
    opener = Opener(sealer)
    assert opener.open(orjson.dumps(moved)) is None and opener.passed == {"tampered": 1}
    assert "does not authenticate" in caplog.text and "[" not in caplog.text.split("error")[-1][:3]


async def test_resource_messages_open_with_their_threads_key_and_one_thread_shreds_alone():
    sealer = new_sealer()
    memory = Memory("resource:u1", "t1")
    events = [memory.message(0, "t1 says hello"), memory.message(1, "t2 says hi", thread_id="t2"),
              memory.observed("* 🔴 one observation")]
    sealed = []
    for e in events:
        data = orjson.loads(encode(e))
        sealed.append(await sealer.seal(encode(e), record_owner(data), context=e.event_id.encode()))
    assert record_owner(orjson.loads(sealed[0])) == "thread:resource:u1/t1"
    assert record_owner(orjson.loads(sealed[2])) == "resource:u1"
    await sealer.shred("thread:resource:u1/t1")
    opener = Opener(sealer)
    await opener.prepare(sealed)
    opened = [opener.open(v) for v in sealed]
    assert opened[0] is None and opened[1] == encode(events[1]) and opened[2] == encode(events[2])
    assert opener.passed == {"shredded": 1}


# --- data at rest after a deletion --------------------------------------------------------------

def secret_thread() -> list:
    """Thread s: a message with the secret, observed (the observer copies it), then deleted."""
    config, state, events = engine(300), new_state("thread:s", "s", "u1"), []
    for i in range(8):
        m = message(i, thread="s")
        m = m.model_copy(update={"content": f"{SECRET} {m.content}" if i == 0 else m.content})
        for item in (m, StepStarted(thread_id="s", step_number=0, at=m.created_at, after_message_id=m.id)):
            out = fold(state, item, config)
            state, events, pending = out.state, events + list(out.events), list(out.jobs)
            while pending:
                out = fold(state, scripted_result(pending.pop(0)), config)
                state, events, pending = out.state, events + list(out.events), pending + list(out.jobs)
    deleted = fold(state, ThreadDeleted(thread_id="s", at=message(9, thread="s").created_at), config).events
    return events + list(deleted)


def on_disk(path: Path) -> bytes:
    """The bytes of a SQLite file and of its WAL."""
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def test_a_deleted_memorys_text_leaves_the_read_model_files(tmp_path):
    events = secret_thread()
    assert events[-1].type == "om-memory-deleted"
    assert any(SECRET in (getattr(e.data, "observations", None) or "") for e in events)
    rows = [(i, encode(e), None) for i, e in enumerate(events)]
    path = tmp_path / "rm.sqlite"
    feed = fed([{0: rows[:-1]}], ReadModelStore(path))
    assert SECRET.encode() in on_disk(path)  # the control: it was there, in clear
    feed._apply_batch({0: rows[-1:]})  # the deletion, through the normal path
    assert feed.projection.threads == {} and feed.store.events_since("thread:s", 0) == []
    assert SECRET.encode() not in on_disk(path)
    feed.store.close()
    assert SECRET.encode() not in on_disk(path)


async def test_a_deleted_memorys_text_leaves_the_search_index_files(tmp_path):
    embedder = HashEmbedder(64)
    path = tmp_path / "ix.sqlite"
    index = SqliteVecIndex(path, embedder.name, embedder.dim)
    projection = IndexProjection(index, embedder)
    kept, gone = Memory("thread:k", "k"), Memory("thread:s", "s")
    await projection.apply([kept.message(0, "hello"), kept.observed(group("k" * 16, "k-m0", "k-m0", ["* 🔴 k"])),
                            gone.message(0, "hi"),
                            gone.observed(group("s" * 16, "s-m0", "s-m0", [f"* 🔴 User's {SECRET}"]))])
    assert index.count("thread:s") == 1 and SECRET.encode() in on_disk(path)
    (chunk,) = [orjson.loads(m)["text"] for (m,) in index._db.execute(
        f"SELECT metadata FROM {index.name} WHERE memory_key = 'thread:s'")]  # noqa: S608
    vector = np.asarray((await embedder.embed([chunk]))[0], dtype=np.float32).tobytes()
    assert vector in on_disk(path)  # the control for the embedding too
    await projection.apply([gone.deleted()])
    assert index.count("thread:s") == 0 and index.count("thread:k") == 1
    assert SECRET.encode() not in on_disk(path) and vector not in on_disk(path)
    index.close()


def observed(memory: Memory, thread: str, text: str, ids: tuple[str, ...], cursor: str):
    event = memory.observed(text, thread_id=thread)
    return event.model_copy(update={"data": event.data.model_copy(update={"observed_message_ids": ids,
                                                                          "cursor": cursor})})


async def test_a_read_model_rebuilt_after_a_resource_thread_deletion_keeps_the_other_threads_observed():
    """One thread of a resource memory deleted rolls the resource's key: every older resource
    event is shredded.  Their clear part still reaches the views, so t2's observed messages stay
    observed and the deletion's kept observations are the text, as in the live read model."""
    memory = Memory("resource:u1", "t1")
    events = [memory.message(0, "t1 private words"), memory.message(1, "t2 words", thread_id="t2"),
              observed(memory, "t1", '<thread id="t1">\n* t1 private fact\n</thread>', ("t1-m0",),
                       "2025-03-03T09:00:00Z"),
              observed(memory, "t2", '<thread id="t1">\n* t1 private fact\n</thread>\n<thread id="t2">\n* t2 fact\n'
                       "</thread>", ("t2-m1",), "2025-03-03T09:01:00Z"),
              memory.message(2, "t2 more words", thread_id="t2")]
    deletion = memory.deleted(thread_id="t1", keeps='<thread id="t2">\n* t2 fact\n</thread>')
    sealer = new_sealer()
    rows = []
    for offset, e in enumerate(events):
        value = encode(e.model_copy(update={"input_offset": offset, "input_last": True}))
        rows.append((offset, await sealer.seal(value, record_owner(orjson.loads(value)),
                                                context=e.event_id.encode()), None))
    # The worker: the resource's epoch and t1's messages shredded; the kept text under the next key.
    await sealer.shred("resource:u1")
    await sealer.shred("thread:resource:u1/t1")
    value = encode(deletion)
    rows.append((len(rows), await sealer.seal(value, "resource:u1", context=deletion.event_id.encode()), None))
    live = fed([{0: [(o, encode(e), None) for o, e in enumerate([*events, deletion])]}])
    rebuilt = fed([{0: rows}], sealer=sealer)
    assert rebuilt.opener.passed["shredded"] == 3  # t1's message and the two observations
    assert set(rebuilt.projection.threads) == set(live.projection.threads) == {"t2"}
    assert rebuilt.projection.snapshot("t2") == live.projection.snapshot("t2")
    assert "t1 private" not in orjson.dumps(rebuilt.projection.snapshot("t2")).decode()
    # The feed's history serves only what still opens: t2's messages (the deletion is not kept).
    assert [e.seq for e in rebuilt.history.since("resource:u1")] == [2, 5]


async def test_the_search_index_feed_opens_sealed_events_and_passes_over_shredded_ones():
    from omstream.projections.search.feed import IndexFeed

    embedder, sealer = HashEmbedder(64), new_sealer()
    index = SqliteVecIndex(":memory:", embedder.name, embedder.dim)
    kept, gone = Memory("thread:k", "k"), Memory("thread:s", "s")
    events = [kept.message(0, "hello"), kept.observed(group("k" * 16, "k-m0", "k-m0", ["* 🔴 User has a cat"])),
              gone.message(0, "hi"), gone.observed(group("s" * 16, "s-m0", "s-m0", [f"* 🔴 User's {SECRET}"]))]
    rows = []
    for offset, e in enumerate(events):
        value = encode(e)
        rows.append((offset, await sealer.seal(value, record_owner(orjson.loads(value)), context=e.event_id.encode()),
                     None))
    await sealer.shred("thread:s")
    feed = IndexFeed(Settings(), IndexProjection(index, embedder), index, sealer)
    await feed.apply({0: rows})
    assert index.count("thread:k") == 1 and index.count("thread:s") == 0
    assert feed.opener.passed == {"shredded": 2} and index.positions() == {0: len(rows)}
    (meta,) = [orjson.loads(m) for (m,) in index._db.execute(f"SELECT metadata FROM {index.name}")]  # noqa: S608
    assert meta["text"] == "* 🔴 User has a cat"
    index.close()
