"""The fold agent's guards (omstream.pipeline.folding.fold_record): no record can crash it.

Each bad record becomes one `<ns>.dlq` record with its code and leaves the memory's state as it
was; a model answer that cannot be applied ends its cycle with the cycle's failed event.
"""

import logging
from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace

import orjson
import pytest

import omstream.pipeline.folding as folding
from omstream.engine.fold import fold, new_state
from omstream.engine.state import MemoryState
from omstream.limits import Limits
from omstream.pipeline.folding import MAX_OUTPUT_BYTES, FoldContext, Outcome, fold_record
from omstream.pipeline.memories import Memories
from omstream.pipeline.signing import HEADER, sign
from omstream.pipeline.storage import load_state
from omstream.schemas.codec import decode_input, encode
from omstream.schemas.jobs import ModelJob
from omstream.schemas.messages import Message
from omstream.settings import Settings
from omstream.topics import Topics
from tests.helpers import T0, engine, message, scripted_result

KEY = b"thread:t1"
SECRET = b"test-key"
TOPICS = Topics("om")
LOG_MS = round((T0 + timedelta(hours=1)).timestamp() * 1000)  # the broker's time: after every message


def context(limits: Limits = Limits(), message_tokens: int = 500) -> FoldContext:
    return FoldContext(Settings(), TOPICS, engine(message_tokens), limits, SECRET)


class Store:
    """The state table, as the fold agent uses it: a batch of one record at a time, its
    writes applied in order (`storage` layout)."""

    def __init__(self) -> None:
        self.records: dict[bytes, bytes] = {}
        self.offset = 0

    def read(self, partition: int, key: bytes) -> bytes | None:
        return self.records.get(key)

    def scan(self, partition: int, prefix: bytes) -> list[bytes]:
        return sorted(k for k in self.records if k.startswith(prefix))

    def feed(self, ctx: FoldContext, value: bytes, *, headers=None, timestamp_ms: int = LOG_MS,
             key: bytes = KEY) -> Outcome:
        record = SimpleNamespace(topic=TOPICS.log, partition=0, offset=self.offset, key=key, value=value,
                                 headers=headers or [], timestamp=timestamp_ms / 1000)
        self.offset += 1
        memories = Memories(self.read, self.scan, MAX_OUTPUT_BYTES)
        outcome = fold_record(ctx, record, memories)
        if outcome.state is not None:
            memories.put(outcome.key, outcome.state)
        for _, k, v in memories.writes():
            if v is None:
                self.records.pop(k, None)
            else:
                self.records[k] = v
        return outcome

    def snapshot(self) -> dict[bytes, bytes]:
        return dict(self.records)

    def state(self) -> MemoryState:
        return load_state(lambda k: self.read(0, k), lambda p: self.scan(0, p), KEY).state


def raw(item) -> bytes:
    return encode(item)


def dead(outcome: Outcome) -> list[dict]:
    return [orjson.loads(v) for t, _, v in outcome.records if t == TOPICS.dlq]


def event_types(outcome: Outcome) -> list[str]:
    return [orjson.loads(v)["type"] for t, _, v in outcome.records if t == TOPICS.events]


def deep_metadata(depth: int) -> bytes:
    body = raw(message(0))  # bytes built by hand: orjson itself refuses to write this depth
    nested = b'{"a":' * depth + b"1" + b"}" * depth
    return body[:-1] + b',"metadata":{"deep":' + nested + b"}}"


def test_deep_metadata_used_to_crash_the_fold_and_is_now_dead_lettered():
    # The crash: ~300 levels validate, then orjson refuses to serialize them again.
    deep = decode_input(deep_metadata(300))
    assert isinstance(deep, Message)
    with pytest.raises(ValueError, match="depth"):  # pydantic, then orjson: "Maximum serialization depth"
        fold(new_state("thread:t1", "t1", "u1"), deep, engine(500))
    # With the depth limit it never reaches the decoder ...
    store = Store()
    outcome = store.feed(context(), deep_metadata(300))
    assert [d["code"] for d in dead(outcome)] == ["too-deep"] and outcome.state is None
    # ... and with the limit raised, the fold's exception is a dead letter, not a crash.
    outcome = store.feed(context(Limits(max_depth=10_000)), deep_metadata(300))
    [letter] = dead(outcome)
    assert letter["code"] == "fold-error" and "depth" in letter["reason"]
    assert letter["value"] and outcome.state is None and KEY not in store.records
    # The memory goes on.
    assert store.feed(context(), raw(message(1))).state is not None
    assert store.state().pending_ids == ("t1-m1",)


@pytest.mark.parametrize("value, code", [
    (orjson.dumps({**orjson.loads(raw(message(0))), "content": [{"type": "text", "text": "x"}] * 201}),
     "too-many-parts"),
    (orjson.dumps({**orjson.loads(raw(message(0))), "content": "x" * 100_001}), "text-too-long"),
    (b'"' + b"x" * (600 * 1024) + b'"', "too-large"),
    (b"{not json", "not-json"),
])
def test_limits_dead_letter_before_the_fold(value, code):
    store = Store()
    outcome = store.feed(context(), value)
    assert [d["code"] for d in dead(outcome)] == [code] and outcome.state is None


def test_created_at_ahead_of_the_log_time_is_future_time():
    store = Store()
    early = round(T0.timestamp() * 1000) - Limits().max_clock_skew_ms - 1
    assert [d["code"] for d in dead(store.feed(context(), raw(message(0)), timestamp_ms=early))] == ["future-time"]
    assert store.feed(context(), raw(message(0)), timestamp_ms=early + 1).state is not None


def test_an_output_too_large_for_the_broker_is_dead_lettered_and_nothing_is_sent():
    store = Store()
    huge = replace(Limits(), max_record_bytes=4 * 1024 * 1024, max_text_chars=10**7)
    value = orjson.dumps({**orjson.loads(raw(message(0))), "content": "word " * (MAX_OUTPUT_BYTES // 4)})
    outcome = store.feed(context(huge, message_tokens=10**7), value)
    [letter] = dead(outcome)
    assert letter["code"] == "output-too-large" and outcome.records == [
        (TOPICS.dlq, KEY, outcome.records[0][2])] and outcome.state is None


def blocking(store: Store, ctx: FoldContext):
    """Fold messages until a blocking observation is in flight; its job."""
    for i in range(6):
        outcome = store.feed(ctx, raw(message(i)))
    [job] = [orjson.loads(v) for t, _, v in outcome.records if t == TOPICS.jobs]
    assert store.state().in_flight is not None
    return ModelJob.model_validate(job)


def signed_result(result) -> tuple[bytes, list]:
    value = encode(result)
    return value, [(HEADER, sign(SECRET, value))]


def test_held_inputs_beyond_the_limit_are_memory_busy():
    store, ctx = Store(), context(Limits(max_held=2))
    job = blocking(store, ctx)
    assert dead(store.feed(ctx, raw(message(6)))) == []
    assert dead(store.feed(ctx, raw(message(7)))) == []
    assert [d["code"] for d in dead(store.feed(ctx, raw(message(8))))] == ["memory-busy"]
    assert len(store.state().held) == 2
    value, headers = signed_result(scripted_result(job))
    assert "data-om-observation-end" in event_types(store.feed(ctx, value, headers=headers))
    assert store.state().pending_ids == ("t1-m6", "t1-m7")  # the held ones, applied after the result


def test_an_answer_that_cannot_be_applied_fails_its_cycle(monkeypatch):
    store, ctx = Store(), context()
    job = blocking(store, ctx)
    store.feed(ctx, raw(message(6)))  # held
    real = folding.fold

    def broken(state, record, config, **kwargs):
        if getattr(record, "ok", False):
            raise RuntimeError("boom")
        return real(state, record, config, **kwargs)

    monkeypatch.setattr(folding, "fold", broken)
    value, headers = signed_result(scripted_result(job))
    outcome = store.feed(ctx, value, headers=headers)
    assert [d["code"] for d in dead(outcome)] == ["fold-error"]
    assert "data-om-observation-failed" in event_types(outcome)
    failed = next(orjson.loads(v) for t, _, v in outcome.records
                  if t == TOPICS.events and b"observation-failed" in v)
    assert failed["data"]["error"].startswith("could not apply the model's answer: RuntimeError: boom")
    state = store.state()
    # The held message is applied; with the first six still unobserved, it starts a new cycle.
    assert state.held == () and "t1-m6" in state.pending_ids
    assert state.in_flight is not None and state.in_flight.cycle_id != job.cycle_id


def test_an_exception_in_the_fold_leaves_the_state_and_the_worker_goes_on(monkeypatch):
    store, ctx = Store(), context()
    store.feed(ctx, raw(message(0)))
    before = store.snapshot()

    def broken(state, record, config):
        raise ValueError("a bug")

    monkeypatch.setattr(folding, "fold", broken)
    outcome = store.feed(ctx, raw(message(1)))
    assert [d["code"] for d in dead(outcome)] == ["fold-error"] and store.snapshot() == before
    monkeypatch.undo()
    store.feed(ctx, raw(message(1)))
    assert store.state().pending_ids == ("t1-m0", "t1-m1")


def test_a_conflict_is_logged_like_every_other_dead_letter(caplog):
    # The fold's own refusals used to reach the DLQ without a log line; an operator reading the
    # worker's log for "dead-lettered" missed them.
    store, ctx = Store(), context()
    store.feed(ctx, raw(message(0)))
    reused = Message.model_validate(orjson.loads(raw(message(0))) | {"content": "another text"})
    with caplog.at_level(logging.WARNING, logger="omstream.worker"):
        outcome = store.feed(ctx, raw(reused))
        refused = store.feed(ctx, b"{not json")
    [letter] = dead(outcome)
    assert letter["code"] == "conflict" and outcome.state is not None
    lines = [r for r in caplog.records if r.getMessage() == "dead-lettered"]
    assert [(r.topic, r.offset, r.code) for r in lines] == [(TOPICS.log, 1, "conflict"), (TOPICS.log, 2, "not-json")]
    assert lines[0].reason == letter["reason"] and "already used for a different message" in lines[0].reason
    assert [d["code"] for d in dead(refused)] == ["not-json"]


def test_a_client_token_count_is_never_trusted():
    ctx = context()
    zero = Message.model_validate(orjson.loads(raw(message(0))) | {"tokens": {"counter": "tokenx", "count": 0}})
    state = fold(new_state("thread:t1", "t1", "u1"), zero, ctx.config).state
    assert state.pending[0].tokens > 0
    assert state.pending[0].tokens == fold(new_state("thread:t1", "t1", "u1"), message(0), ctx.config).state.pending[0].tokens


def test_an_input_past_the_cycle_deadline_is_not_busy_it_ends_the_cycle():
    ctx = FoldContext(Settings(), TOPICS, engine(500, cycleDeadline="1m"), Limits(max_held=1), SECRET)
    store = Store()
    blocking(store, ctx)
    store.feed(ctx, raw(message(6)))  # held: the one allowed
    # Written two minutes (of log time) after the cycle began: past the deadline, not busy.
    outcome = store.feed(ctx, raw(message(7)), timestamp_ms=LOG_MS + 2 * 60_000)
    assert dead(outcome) == [] and "data-om-observation-failed" in event_types(outcome)


def test_large_messages_no_longer_add_up_to_a_state_too_large_for_the_broker():
    # Each pending message is a record of its own (`storage`), so two messages that would have
    # passed the limit together in one state record are both kept.
    ctx = context(replace(Limits(), max_record_bytes=4 * 1024 * 1024, max_text_chars=10**7), message_tokens=10**7)
    store = Store()
    half = MAX_OUTPUT_BYTES * 6 // 10  # each message's event fits; two together do not
    for i, letter in enumerate("ab"):
        outcome = store.feed(ctx, orjson.dumps({**orjson.loads(raw(message(i))), "content": f"{letter} " * (half // 2)}))
        assert dead(outcome) == []
    assert store.state().pending_ids == ("t1-m0", "t1-m1")
    assert max(len(v) for v in store.records.values()) < MAX_OUTPUT_BYTES


def test_a_settled_version_holds_past_the_limit_and_ignores_other_versions_results():
    settled = engine(500)
    settled = type(settled)(settled.om, "replay", settled=True)
    ctx = FoldContext(Settings(), TOPICS, settled, Limits(max_held=2), SECRET)
    store = Store()
    job = blocking(store, ctx)
    assert job.version == "replay" and job.config_digest == settled.digest
    for i in (6, 7, 8, 9):
        assert dead(store.feed(ctx, raw(message(i)))) == []
    assert len(store.state().held) == 4
    # The live version's answer to the same cycle and request is not this version's input.
    live = scripted_result(job).model_copy(update={"version": "live"})
    value, headers = signed_result(live)
    assert store.feed(ctx, value, headers=headers).records == [] and store.state().in_flight is not None
    value, headers = signed_result(scripted_result(job))
    assert "data-om-observation-end" in event_types(store.feed(ctx, value, headers=headers))
    assert store.state().pending_ids == ("t1-m6", "t1-m7", "t1-m8", "t1-m9")


def test_a_version_of_some_resources_folds_only_their_memories():
    """`om replay --resources u1` (scope 'resource'): u2's records are passed over, u1's folded."""
    config = engine(500, scope="resource")
    settings = Settings(only_resources=" u1 ,", om=config.om)
    ctx = FoldContext(settings, TOPICS, config, Limits(), SECRET, resources=settings.resource_filter)
    store = Store()
    mine = message(0)  # of resource u1
    other = message(0, thread="t2").model_copy(update={"resource_id": "u2"})
    folded = store.feed(ctx, raw(mine), key=b"resource:u1")
    passed = store.feed(ctx, raw(other), key=b"resource:u2")
    assert ctx.resources == frozenset({"resource:u1"})
    assert "om-message-accepted" in event_types(folded) and folded.state is not None
    assert passed.records == [] and passed.state is None
    assert sorted(k for k in store.records if k.startswith(b"resource:u2")) == []
