"""The model agent without a broker (`omstream.worker.model_agent.ModelAgent`): jobs acked in
log order, equal requests in flight run once, every job answered on the log, signed.

The broker (the sender, the acks), the model and the result cache are faked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace

import orjson

from omstream.pipeline.sending import Headers, OutputRecord
from omstream.pipeline.signing import HEADER, sign, signed
from omstream.schemas.codec import decode_input, encode
from omstream.schemas.dead_letters import DeadLetter
from omstream.schemas.jobs import ChatMessage, ModelJob, ModelResult
from omstream.topics import Topics
from omstream.versions import WorkerStats
from omstream.worker.model_agent import ModelAgent
from tests.helpers import engine, until

TOPICS = Topics("om")
SECRET = b"secret"
T = datetime(2025, 3, 3, tzinfo=UTC)


def job(cycle: str, request: str, thread: str = "t1") -> ModelJob:
    return ModelJob(kind="observe", cycle_id=cycle, memory_key=f"thread:{thread}", thread_id=thread, generation=0,
                    model="scripted/observer", messages=(ChatMessage(role="user", content="hi"),),
                    request_hash=request, created_at=T)


def answered(j: ModelJob, output: str = "* noted") -> ModelResult:
    return ModelResult(kind=j.kind, cycle_id=j.cycle_id, memory_key=j.memory_key, thread_id=j.thread_id,
                       request_hash=j.request_hash, ok=True, output=output, model=j.model, started_at=T,
                       completed_at=T)


def event(offset: int, value: bytes):
    message = SimpleNamespace(topic=TOPICS.jobs, partition=0, offset=offset, key=b"thread:t1", value=value,
                              headers=[])
    return SimpleNamespace(message=message)


class Sender:
    def __init__(self) -> None:
        self.sent: list[tuple[OutputRecord, Headers | None]] = []

    async def send_all(self, records: Sequence[OutputRecord], headers: Headers | None = None) -> None:
        self.sent += [(r, headers) for r in records]

    def on(self, topic: str) -> list[tuple[OutputRecord, Headers | None]]:
        return [(r, h) for r, h in self.sent if r.topic == topic]


class Cache:
    """`ResultCache` in memory: answers by request hash."""

    def __init__(self) -> None:
        self.entries: dict[bytes, bytes] = {}

    def get(self, j: ModelJob) -> ModelResult | None:
        raw = self.entries.get(j.request_hash.encode())
        return None if raw is None else ModelResult.model_validate_json(raw)

    def entry(self, result: ModelResult) -> tuple[bytes, bytes, Headers]:
        value = encode(result.model_copy(update={"cached": None}))
        return result.request_hash.encode(), value, [(HEADER, sign(SECRET, value))]

    def remember(self, key: bytes, value: bytes) -> None:
        self.entries[key] = value


class Model:
    """Answers each job once its cycle's gate opens (all open unless `hold`)."""

    def __init__(self, hold: Sequence[str] = ()) -> None:
        self.gates = {cycle: asyncio.Event() for cycle in hold}
        self.calls: list[str] = []

    async def __call__(self, j: ModelJob) -> ModelResult:
        self.calls.append(j.cycle_id)
        if j.cycle_id in self.gates:
            await self.gates[j.cycle_id].wait()
        return answered(j)


def agent(model: Model, *, cache: Cache | None = None, concurrency: int = 8) -> ModelAgent:
    return ModelAgent(run=model, cache=cache or Cache(), sender=Sender(), topics=TOPICS, config=engine(500),
                      result_key=SECRET, deadline_s=5.0, concurrency=concurrency, stats=WorkerStats())


async def events_of(*events):
    for e in events:
        yield e


def results(a: ModelAgent) -> list[ModelResult]:
    out = []
    for r, headers in a.sender.on(TOPICS.log):
        assert signed(SECRET, r.value, headers), "every result on the log is signed"
        decoded = decode_input(r.value)
        assert isinstance(decoded, ModelResult) and r.key == decoded.memory_key.encode()
        out.append(decoded)
    return out


async def test_jobs_are_acked_in_log_order_when_later_ones_finish_first():
    model = Model(hold=("c0", "c1", "c2"))
    a, acked = agent(model), []

    async def ack(e) -> bool:
        acked.append(e.message.offset)
        return True

    jobs = [job(f"c{i}", f"r{i}") for i in range(3)]
    await a.consume(events_of(*(event(i, encode(j)) for i, j in enumerate(jobs))), ack)
    await until(lambda: len(model.calls) == 3)  # all three run at once
    model.gates["c2"].set()
    model.gates["c1"].set()
    await until(lambda: len(results(a)) == 2)
    await asyncio.sleep(0.05)
    assert acked == []  # the first job still runs: nothing may be committed
    model.gates["c0"].set()
    await until(lambda: len(acked) == 3)
    assert acked == [0, 1, 2]
    assert [r.cycle_id for r in results(a)] == ["c2", "c1", "c0"]


async def test_at_most_concurrency_jobs_run_at_once():
    model = Model(hold=("c0", "c1", "c2"))
    a = agent(model, concurrency=2)
    consuming = asyncio.create_task(a.consume(events_of(*(event(i, encode(job(f"c{i}", f"r{i}")))
                                                          for i in range(3))), _ack_nothing))
    await until(lambda: len(model.calls) == 2)
    await asyncio.sleep(0.05)
    assert model.calls == ["c0", "c1"]
    model.gates["c1"].set()
    await until(lambda: model.calls == ["c0", "c1", "c2"])
    for gate in model.gates.values():
        gate.set()
    await consuming


async def test_equal_requests_in_flight_are_run_once():
    model = Model(hold=("c1",))
    cache = Cache()
    a = agent(model, cache=cache)
    first, second = job("c1", "same", thread="t1"), job("c2", "same", thread="t2")
    await a.consume(events_of(event(0, encode(first)), event(1, encode(second))), _ack_nothing)
    await asyncio.sleep(0.05)
    assert model.calls == ["c1"]  # the second waits for the first's answer
    model.gates["c1"].set()
    await until(lambda: len(results(a)) == 2)
    one, two = results(a)
    assert (one.cycle_id, one.cached) == ("c1", None) and (two.cycle_id, two.memory_key, two.cached) == (
        "c2", "thread:t2", True)
    assert two.output == one.output and model.calls == ["c1"]
    # The first answer went to the cache once the log had it.
    assert [r.key for r, _ in a.sender.on(TOPICS.cache)] == [b"same"] and b"same" in cache.entries
    assert (a.stats.model_calls, a.stats.cache_hits) == (1, 1)


async def test_an_answer_already_in_the_log_for_this_cycle_is_not_sent_again():
    cache = Cache()
    j = job("c1", "r1")
    key, value, _ = cache.entry(answered(j))
    cache.remember(key, value)  # the job ran before a crash; its result is in the log and the cache
    model = Model()
    a = agent(model, cache=cache)
    await a.answer(event(0, encode(j)).message)
    assert a.sender.sent == [] and model.calls == [] and a.stats.cache_hits == 1


async def test_an_undecodable_job_that_names_its_cycle_is_answered_failed():
    a = agent(Model())
    raw = orjson.dumps({**orjson.loads(encode(job("c1", "r1"))), "messages": "oops"})
    await a.answer(event(0, raw).message)
    [result] = results(a)
    assert not result.ok and result.error_code == "invalid-job" and result.cycle_id == "c1"
    assert a.sender.on(TOPICS.cache) == [] and a.sender.on(TOPICS.dlq) == []


async def test_a_job_that_names_no_cycle_is_dead_lettered():
    a = agent(Model())
    await a.answer(event(7, b'{"cycleId": "c1"}').message)
    assert results(a) == []
    [(record, _)] = a.sender.on(TOPICS.dlq)
    letter = DeadLetter.model_validate_json(record.value)
    assert (letter.code, letter.source.topic, letter.source.offset) == ("invalid", TOPICS.jobs, 7)
    assert letter.reason.startswith("invalid model job") and letter.original() == b'{"cycleId": "c1"}'


async def test_a_failed_call_is_sent_but_not_cached_and_an_equal_request_asks_again():
    calls = []

    async def failing(j: ModelJob) -> ModelResult:
        calls.append(j.cycle_id)
        return answered(j).model_copy(update={"ok": False, "output": None, "error": "HTTP 500",
                                              "error_code": "server-error"})

    a = ModelAgent(run=failing, cache=Cache(), sender=Sender(), topics=TOPICS, config=engine(500),
                   result_key=SECRET, deadline_s=5.0, concurrency=4, stats=WorkerStats())
    await a.consume(events_of(event(0, encode(job("c1", "same"))), event(1, encode(job("c2", "same")))),
                    _ack_nothing)
    await until(lambda: len(results(a)) == 2)
    assert calls == ["c1", "c2"] and a.sender.on(TOPICS.cache) == []
    assert [r.ok for r in results(a)] == [False, False]


async def _ack_nothing(_) -> bool:
    return True
