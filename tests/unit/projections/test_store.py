"""The persistent read model without a broker: a projection kept in the store and read back
equals the one built in memory from the same events (views, history, last seqs, position); a
process that dies inside a batch leaves the views and the position of the batch before; a
second process gets its own slot."""

import asyncio
import multiprocessing
import os

import pytest
from aiohttp.test_utils import TestClient, TestServer

from omstream.client.feed_reader import sse_frames
from omstream.engine.fold import fold, new_state
from omstream.projections.feed import ProjectionFeed
from omstream.projections.follower import Batch
from omstream.projections.http.web import build_web_app
from omstream.projections.store.store import ReadModelBusy, ReadModelStore, open_store
from omstream.projections.store.stored_history import StoredHistory
from omstream.projections.views.history import EventHistory
from omstream.projections.views.parts import data_part, frame_json
from omstream.schemas.codec import encode
from omstream.schemas.control import StepStarted, ThreadDeleted
from omstream.settings import Settings
from tests.helpers import engine, message, scripted_result
from tests.unit.projections.test_feed_sse import lifecycle

SOURCE, ENDS = "t.events/1", {0: 10**9}


def memory_events(thread: str, config, count: int, delete_at: int | None = None) -> list:
    """A memory's events: messages and steps, every model job answered at once (cycles end,
    buffered chunks activate); a deletion at message `delete_at`, then the thread again."""
    state, events = new_state(f"thread:{thread}", thread, "u1"), []
    for i in range(count):
        inputs = [message(i, thread=thread),
                  StepStarted(thread_id=thread, step_number=0, at=message(i, thread=thread).created_at,
                              after_message_id=f"{thread}-m{i}")]
        if i == delete_at:
            inputs.append(ThreadDeleted(thread_id=thread, at=message(i, thread=thread).created_at))
        for item in inputs:
            out = fold(state, item, config)
            state, events, pending = out.state, events + list(out.events), list(out.jobs)
            while pending:
                out = fold(state, scripted_result(pending.pop(0)), config)
                state, events, pending = out.state, events + list(out.events), pending + list(out.jobs)
    return events


@pytest.fixture(scope="module")
def batches() -> list[Batch]:
    """Three memories' events interleaved on one partition, cut into batches of 7."""
    sync = engine(300)
    buffered = engine(400, observation={"bufferTokens": 0.25, "bufferActivation": 0.8})
    streams = [memory_events("a", sync, 14), memory_events("b", buffered, 16),
               memory_events("c", sync, 12, delete_at=6)]
    kinds = {e.type for s in streams for e in s}
    assert {"data-om-observation-end", "data-om-activation", "om-memory-deleted"} <= kinds, kinds
    merged = [e for group in zip(*[s + [None] * (300 - len(s)) for s in streams], strict=True)
              for e in group if e is not None]
    # Each event the whole output of one input record, as the worker stamps it.
    records = [(offset, encode(e.model_copy(update={"input_offset": offset, "input_last": True})),
                1_700_000_000_000 + offset) for offset, e in enumerate(merged)]
    # A re-sent event (a worker crash) in the middle: applied once.
    records.insert(40, (40, records[30][1], None))
    records = [(offset, value, ts) for offset, (_, value, ts) in enumerate(records)]
    return [{0: records[i:i + 7]} for i in range(0, len(records), 7)]


def fed(batches: list[Batch], store: ReadModelStore | None = None) -> ProjectionFeed:
    feed = ProjectionFeed(Settings(), store=store)
    feed._load(SOURCE, ENDS)
    for batch in batches:
        feed._apply_batch(batch)
    return feed


def picture(feed: ProjectionFeed) -> dict:
    """Everything a reader can get from the feed: windows, history frames, seqs, position."""
    return {
        "views": {t: v.snapshot() for t, v in feed.projection.threads.items()},
        "fields": {t: (v.events, v.last_seq, v.last_activation, v.clock, sorted(v.in_flight))
                   for t, v in feed.projection.threads.items()},
        "history": {k: [(e.seq, e.type, e.frame, e.appended_ms, e.event) for e in feed.history.since(k)]
                    for k in sorted(feed.history.memories())},
        "last_seq": {k: feed.history.last_seq(k) for k in ("thread:a", "thread:b", "thread:c")},
        "projection_seq": dict(feed.projection.last_seq),
        "applied": feed.applied,
    }


def test_a_stored_projection_read_back_equals_the_one_built_in_memory(batches, tmp_path):
    memory = picture(fed(batches))
    live = fed(batches, ReadModelStore(tmp_path / "rm.sqlite"))
    assert picture(live) == memory
    live.store.close()
    store = ReadModelStore(tmp_path / "rm.sqlite")
    back = fed([], store)
    assert picture(back) == memory
    ends = sum(len(b[0]) for b in batches)
    assert store.positions() == {0: (ends, ends - 2)} and back.caught_up(0, ends - 2)  # (a duplicate)
    assert set(memory["views"]) == {"a", "b", "c"} and memory["views"]["c"]["messages"]
    assert all(e[0] > 6 for e in memory["history"]["thread:c"])  # what came before the deletion is gone
    # Resumed: the rest of the events on top of the stored state, the same as all at once.
    store.close()
    half = fed(batches[:9], ReadModelStore(tmp_path / "half.sqlite"))
    half.store.close()
    assert picture(fed(batches[9:], ReadModelStore(tmp_path / "half.sqlite"))) == memory


def _die_in_batch(path: str, batches: list[Batch], upto: int) -> None:
    feed = fed(batches[:upto], ReadModelStore(path))

    def crash(*_):
        os._exit(17)  # the process dies after the views were written, before the position

    feed.store.set_position = crash
    feed._apply_batch(batches[upto])


def test_a_process_that_dies_inside_a_batch_leaves_views_and_position_together(batches, tmp_path):
    path = tmp_path / "rm.sqlite"
    child = multiprocessing.get_context("fork").Process(target=_die_in_batch, args=(str(path), batches, 5))
    child.start()
    child.join(30)
    assert child.exitcode == 17
    store = ReadModelStore(path)
    first = batches[5][0][0][0]  # the first offset of the lost batch
    assert store.positions() == {0: (first, first - 1)}
    assert picture(fed([], store)) == picture(fed(batches[:5]))
    # Read again from there, the batch is applied once: the end is the same as without a crash.
    assert picture(fed(batches[5:], ReadModelStore(path))) == picture(fed(batches))


def test_each_process_gets_its_own_slot_and_a_clear_error_when_none_is_left(tmp_path):
    settings = Settings(data_dir=tmp_path)
    first, second = open_store(settings, slots=2), open_store(settings, slots=2)
    assert first.path != second.path
    with pytest.raises(ReadModelBusy, match="held by running `om serve`"):
        open_store(settings, slots=2)
    first.close()
    again = open_store(settings, slots=2)  # a stopped process's slot is free again
    assert again.path == first.path
    again.close()
    second.close()


def test_a_store_built_from_another_topic_layout_is_rebuilt(batches, tmp_path):
    feed = fed(batches, ReadModelStore(tmp_path / "rm.sqlite"))
    feed.store.close()
    store = ReadModelStore(tmp_path / "rm.sqlite")
    again = ProjectionFeed(Settings(), store=store)
    assert again._load("t.events/3", {0: 10**9}) == {}  # partitions changed: from the beginning
    assert again.projection.threads == {} and store.positions() == {} and store.memories() == []
    store.close()


@pytest.fixture(params=["memory", "stored"])
def history(request, tmp_path):
    """Each kind of history: the contract is the same."""
    if request.param == "memory":
        yield EventHistory()
        return
    store = ReadModelStore(tmp_path / "rm.sqlite")
    yield StoredHistory(store)
    store.close()


def test_either_history_replays_from_a_seq_once_and_deletion_forgets_it(history):
    state, events, config = lifecycle()
    live = history.subscribe("thread:t1")
    history.extend(events)
    history.extend(events)  # re-sent after a crash: nothing twice
    seqs = [e.seq for e in events]
    assert [e.seq for e in history.since("thread:t1")] == seqs
    assert [(e.frame, e.event) for e in history.since("thread:t1", 5)] == [
        (frame_json(data_part(e)), e) for e in events[5:]]
    assert history.since("thread:other") == [] and history.memories() == ["thread:t1"]
    assert live.queue.qsize() == len(events)
    deleted = fold(state, ThreadDeleted(thread_id="t1", at=message(20).created_at), config).events
    history.extend(deleted)
    history.extend(events)  # an old event re-sent cannot bring the history back
    assert history.since("thread:t1") == [] and history.last_seq("thread:t1") == deleted[-1].seq
    assert history.memories() == []


def test_the_feed_and_as_of_routes_read_a_stored_history_as_an_in_memory_one(tmp_path):
    _, events, _ = lifecycle()
    batch: Batch = {0: [(i, encode(e), None) for i, e in enumerate(events)]}
    middle = events[len(events) // 2].seq

    async def replay(store: ReadModelStore | None) -> tuple[list, dict]:
        feed = fed([batch], store)
        client = TestClient(TestServer(build_web_app(feed)))
        await client.start_server()
        try:
            response = await client.get("/threads/t1/events", params={"follow": "false", "after": "3"})
            frames = [(i, data) async for i, data in sse_frames(response.content)]
            as_of = await (await client.get("/threads/t1/context", params={"asOf": str(middle)})).json()
            return frames, as_of
        finally:
            await client.close()

    stored, stored_as_of = asyncio.run(replay(ReadModelStore(tmp_path / "rm.sqlite")))
    assert (stored, stored_as_of) == asyncio.run(replay(None))
    assert [i for i, _ in stored] == [str(e.seq) for e in events[3:]] + [None]
    assert stored_as_of["asOf"] == middle and stored_as_of["lastSeq"] == events[-1].seq
