"""The stored layout of a memory (omstream.pipeline.storage): what is written, what is read back, and old states.

The store here is a dict standing in for one partition's RocksDB; `Memories` (`omstream.pipeline.memories`)
and `plan_writes` are the worker's own code.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from omstream.engine.fold import fold, new_state
from omstream.engine.state import MemoryState, PendingMessage
from omstream.pipeline.memories import Memories, StateCache
from omstream.pipeline.storage import SEP, load_state
from tests.helpers import engine, message, scripted_result

KEY = b"thread:t1"
LIMIT = 900 * 1024
load_pending = PendingMessage.model_validate_json
V1 = Path(__file__).resolve().parents[2] / "fixtures" / "states" / "v1-thread-t1.json"


class Table:
    """One partition's store: records by key, written batch by batch (through the worker's
    cache of written memories if given one).  `lagging`: as the worker does, each batch is
    folded and planned before the previous batch's writes reach the store."""

    def __init__(self, cache: StateCache | None = None, *, lagging: bool = False) -> None:
        self.records: dict[bytes, bytes] = {}
        self.written = 0  # bytes of key + value sent to the changelog
        self.cache = cache
        self.reads: list[bytes] = []
        self.lagging = lagging
        self.unsaved: dict = {}
        self.on_the_way: tuple[list, dict] | None = None  # the previous batch's writes and memories

    def read(self, partition: int, key: bytes) -> bytes | None:
        self.reads.append(key)
        return self.records.get(key)

    def scan(self, partition: int, prefix: bytes) -> list[bytes]:
        return sorted(k for k in self.records if k.startswith(prefix))

    def batch(self, inputs, config) -> list:
        """Fold `inputs` as one batch of the worker would; the jobs it emitted."""
        memories = Memories(self.read, self.scan, LIMIT, self.cache, self.unsaved)
        state = memories.get(KEY, 0) or new_state("thread:t1", "t1", "u1")
        jobs = []
        for item in inputs:
            out = fold(state, item, config)
            memories.check(KEY, state, out.state)
            state = out.state
            jobs += out.jobs
        memories.put(KEY, state)
        self.store(memories)
        return jobs

    def store(self, memories: Memories) -> None:
        """Plan the batch's writes and send them; unless `lagging`, they reach the store at once."""
        writes = memories.writes()
        self.flush()
        self.on_the_way = (writes, memories.stored())
        if self.lagging:
            self.unsaved = memories.stored()
        else:
            self.flush()

    def flush(self) -> None:
        """The writes on their way reach the store."""
        if self.on_the_way is None:
            return
        writes, stored = self.on_the_way
        self.on_the_way = None
        for _, key, value in writes:
            self.written += len(key) + len(value or b"")
            if value is None:
                self.records.pop(key, None)
            else:
                self.records[key] = value
        if self.cache is not None:
            self.cache.keep(stored)

    def state(self) -> MemoryState:
        return load_state(lambda k: self.read(0, k), lambda p: self.scan(0, p), KEY).state

    def memory_bytes(self, *, seen: bool = True) -> int:
        """All records of the memory; without the per-message index of seen ids if asked."""
        ids = KEY + SEP + b"s" + SEP
        return sum(len(k) + len(v) for k, v in self.records.items()
                   if (k == KEY or k.startswith(KEY + SEP)) and (seen or not k.startswith(ids)))


def comparable(state: MemoryState) -> dict:
    return {**state.model_dump(mode="json"), "seen": dict(state.seen)}


def run(table: Table, config, messages, batch_sizes) -> MemoryState:
    """Fold `messages` in batches of the given sizes (cycled), answering every job in the next
    batch; returns the pure fold's state for the same inputs in the same order."""
    pure = new_state("thread:t1", "t1", "u1")
    queue, i, n = [], 0, 0
    while i < len(messages) or queue:
        size = batch_sizes[n % len(batch_sizes)]
        n += 1
        inputs = [scripted_result(job) for job in queue] + list(messages[i:i + size])
        i += size
        for item in inputs:
            pure = fold(pure, item, config).state
        queue = table.batch(inputs, config)
    return pure


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=5), st.integers(20, 80))
def test_what_is_stored_reads_back_as_the_folded_state(batch_sizes, count):
    config = engine(400, observation={"bufferTokens": 120}, reflection={"observationTokens": 500})
    table = Table()
    pure = run(table, config, [message(i, words=25) for i in range(count)], batch_sizes)
    assert comparable(table.state()) == comparable(pure)
    assert pure.generation > 0 or count < 40  # reflections happened on the longer runs


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=5), st.integers(20, 90), st.booleans())
# The deletion and the duplicate in one batch: the write that starts the memory again accepts
# t1-m3 anew, and must not delete its record as garbage of before the deletion.
@example(batch_sizes=[1, 9, 12], count=20, buffering=False)
def test_the_cache_of_written_memories_changes_nothing_that_is_stored(batch_sizes, count, buffering):
    """The worker folds a cached memory from what it last wrote instead of reading the store,
    and folds a batch while the previous one is still being stored: byte for byte the same
    records either way, and the same memory read back.  Without buffering every cycle blocks,
    so held inputs come and go too; the thread is deleted half-way."""
    from omstream.schemas.control import ThreadDeleted

    config = engine(400, observation={"bufferTokens": 120 if buffering else False},
                    reflection={"observationTokens": 500})
    inputs = [message(i, words=25) for i in range(count)] + [message(3, words=25)]  # 3: a duplicate
    inputs.insert(count // 2, ThreadDeleted(thread_id="t1", resource_id="u1", at=message(count // 2).created_at))
    plain, cached, lagging = Table(), Table(StateCache(4)), Table(StateCache(0), lagging=True)
    for table in (plain, cached, lagging):
        run(table, config, inputs, batch_sizes)
    lagging.flush()
    assert cached.records == plain.records and lagging.records == plain.records
    assert comparable(cached.state()) == comparable(plain.state()) == comparable(lagging.state())
    assert len(cached.cache) == 1


def test_a_cached_memory_is_not_read_back_from_the_store():
    config = engine(400, observation={"bufferTokens": False})
    table = Table(StateCache(4))
    run(table, config, [message(i, words=25) for i in range(30)], [7])
    table.reads.clear()
    table.batch([message(30, words=25)], config)
    # Only the message's own id is looked up (is it a duplicate?), never the state's records.
    assert table.reads == [KEY + SEP + b"s" + SEP + b"t1-m30"]
    table.cache.clear()
    table.batch([message(31, words=25)], config)
    assert KEY in table.reads  # an empty cache reads the store again


def test_the_cache_keeps_the_most_recently_used_memories():
    cache = StateCache(2)
    cache.keep({b"a": "A", b"b": "B"})  # type: ignore[dict-item]
    assert cache.get(b"a") == "A"  # a is now the most recent
    cache.keep({b"c": "C"})  # type: ignore[dict-item]
    assert (cache.get(b"b"), cache.get(b"a"), cache.get(b"c")) == (None, "A", "C")


def test_a_memory_forgets_its_records_when_deleted():
    from omstream.schemas.control import ThreadDeleted

    config = engine(400, observation={"bufferTokens": 120})
    table = Table()
    run(table, config, [message(i, words=25) for i in range(30)], [7])
    table.batch([ThreadDeleted(thread_id="t1", resource_id="u1", at=message(40).created_at)], config)
    assert [k for k in table.records if k != KEY] == []  # pending, seen, observations: gone
    state = table.state()
    assert state.pending == () and dict(state.seen) == {} and state.seq > 0


def test_a_deletion_after_a_crashed_write_forgets_the_ids_the_crash_left_unwritten():
    """A crash after a write's core, before its ids: the next write, a deletion, must not write
    them (they would be stale at once, and its scan of the store for old ids cannot find them)."""
    from omstream.schemas.control import ThreadDeleted

    config = engine(400, observation={"bufferTokens": False})
    table = Table()
    run(table, config, [message(i, words=25) for i in range(5)], [5])
    memories = Memories(table.read, table.scan, LIMIT)
    state = memories.get(KEY, 0)
    for item in [message(i, words=25) for i in range(5, 8)]:
        state = fold(state, item, config).state
    memories.put(KEY, state)
    records = memories.writes()
    for _, key, value in records[:[k for _, k, _ in records].index(KEY) + 1]:  # the crash
        if value is None:
            table.records.pop(key, None)
        else:
            table.records[key] = value
    assert "t1-m7" in table.state().seen and KEY + SEP + b"s" + SEP + b"t1-m7" not in table.records
    table.batch([ThreadDeleted(thread_id="t1", resource_id="u1", at=message(9).created_at),
                 message(20, words=25)], config)
    ids = sorted(k for k in table.records if k.startswith(KEY + SEP + b"s" + SEP))
    assert ids == [KEY + SEP + b"s" + SEP + b"t1-m20"]
    assert dict(table.state().seen).keys() == {"t1-m20"}


def test_state_records_stay_small_as_one_thread_grows_to_10000_messages():
    """Acceptance: the state a batch rewrites does not grow with the thread (1,000 -> 10,000)."""
    config = engine(3000, observation={"bufferTokens": 600})
    table = Table()
    figures = {}
    queue: list = []
    for n in range(0, 10_000, 50):
        before = table.written
        for i in range(n, n + 50, 5):  # a model that answers within five messages
            queue = table.batch([scripted_result(job) for job in queue] + [message(j, words=30) for j in range(i, i + 5)],
                                config)
        if n + 50 in (1_000, 10_000):
            core = len(table.records[KEY])
            figures[n + 50] = (core, table.memory_bytes(seen=False), table.memory_bytes(), table.written - before)
    print("messages: (core record, state bytes without seen ids, with them, bytes written for the last 50 messages)", figures)
    (core_1k, state_1k, _, batch_1k), (core_10k, state_10k, _, batch_10k) = figures[1_000], figures[10_000]
    assert core_1k < 4096 and core_10k < 4096
    # Pending messages and observations are bounded by the thresholds, not by the thread.
    assert state_10k < 2 * state_1k + 64 * 1024, figures
    # A batch of 50 messages writes about their own size, not the thread's history.
    assert batch_10k < 3 * batch_1k + 200 * 1024, figures
    assert table.state().generation > 3  # reflections ran


def test_fields_at_their_defaults_are_not_written_and_a_core_with_every_field_reads_the_same():
    """The core and the pending messages leave out fields at their defaults (most of the core's
    fifty fields, most of the time); stores written before that, with every field, read the same."""
    config = engine(400, observation={"bufferTokens": 120}, reflection={"observationTokens": 500})
    table = Table()
    run(table, config, [message(i, words=25) for i in range(30)], [4, 7])
    lean = table.state()
    core = orjson.loads(table.records[KEY])
    assert "title" not in core and "blocked_since" not in core and core["memory_key"] == "thread:t1"
    pending = [k for k in table.records if k.startswith(KEY + SEP + b"p" + SEP)]
    assert pending and all(b'"title"' not in table.records[k] for k in pending)
    full_state = {**lean.model_dump(mode="json", exclude={"pending", "held", "history", "observations", "chunks",
                                                          "in_flight", "buffering", "reflection_buffering",
                                                          "buffered_reflection"})}
    table.records[KEY] = orjson.dumps({**core, **full_state})
    for k in pending:
        item = load_pending(table.records[k])
        table.records[k] = item.model_dump_json().encode()
    assert len(table.records[KEY]) > len(orjson.dumps(core)) + 200  # the old way was that much larger
    assert comparable(table.state()) == comparable(lean)


def test_a_version_1_state_is_migrated_and_folding_continues():
    """A stored state written before this layout (the whole state in one record, `seen` inline)."""
    config = engine(600, observation={"bufferTokens": 200}, reflection={"observationTokens": 800})
    raw = V1.read_bytes()
    assert b'"v"' not in raw[:20] and b'"seen"' in raw
    table = Table()
    table.records[KEY] = raw
    old = MemoryState.model_validate_json(raw)  # what the pure fold continues from
    later = [message(i, words=30) for i in range(40, 60)] + [message(5, words=30)]  # 5: a duplicate
    table.batch(later, config)
    assert orjson.loads(table.records[KEY])["v"] == 2 and b'"seen"' not in table.records[KEY]
    pure = old
    for item in later:
        pure = fold(pure, item, config).state
    assert comparable(table.state()) == comparable(pure)
    assert table.state().seq > old.seq and "t1-m5" in table.state().seen
    assert not any(m.id == "t1-m5" for m in table.state().pending)  # the duplicate was recognised


def test_an_unreadable_state_starts_the_memory_again_and_keeps_its_sequence():
    table = Table()
    table.records[KEY] = orjson.dumps({"v": 2, "seq": 41, "memory_key": "thread:t1", "ranges": "nonsense"})
    table.records[KEY + SEP + b"o"] = b'"old observations"'
    memories = Memories(table.read, table.scan, LIMIT)
    assert memories.get(KEY, 0) is None
    [(key, _, reason, raw)] = memories.unreadable
    assert key == KEY and raw == table.records[KEY] and reason
    assert memories.salvaged_seq(KEY) == 41
    memories.put(KEY, new_state("thread:t1", "t1", "u1").model_copy(update={"seq": 41}))
    writes = {k: v for _, k, v in memories.writes()}
    assert writes[KEY + SEP + b"o"] is None  # the old pieces are deleted with it


@settings(max_examples=30, deadline=None)
@given(st.integers(10, 60), st.data())
def test_a_crash_part_way_through_a_write_leaves_one_state_or_the_next(count, data):
    """The changelog gets a batch's records in order; a crash may stop it after any of them.
    What a restart reads back is the state before the batch or after it, never a mixture, and
    refolding the batch from there, in other batch boundaries, gives the same memory as an
    uninterrupted run (no id of the crashed attempt makes a message look like a duplicate)."""
    config = engine(400, observation={"bufferTokens": 120}, reflection={"observationTokens": 500})
    inputs = [message(i, words=25) for i in range(count)]
    table = Table()
    run(table, config, inputs[:count // 2], [7])
    before = comparable(table.state())
    batch = inputs[count // 2:]
    memories = Memories(table.read, table.scan, LIMIT)
    state = memories.get(KEY, 0)
    for item in batch:
        state = fold(state, item, config).state
    memories.put(KEY, state)
    records = memories.writes()
    cut = data.draw(st.integers(0, len(records)))
    for _, key, value in records[:cut]:  # the crash: only these reached the changelog
        if value is None:
            table.records.pop(key, None)
        else:
            table.records[key] = value
    after = comparable(table.state())
    assert after in (before, comparable(state))
    if after == before:  # the batch is redelivered, and may be cut into other batches this time
        split = data.draw(st.integers(0, len(batch)))
        table.batch(batch[:split], config)
        table.batch(batch[split:], config)
    assert comparable(table.state()) == comparable(state)
