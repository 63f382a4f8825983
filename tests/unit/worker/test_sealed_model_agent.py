"""The model agent of a sealed namespace, without a broker: a sealed job opened with its memory's
key, its answer sealed before it is signed, a shredded job answered failed without text, and the
result cache per memory (`ResultCache.under`): a hit for a live memory, a replay's hit, a miss
once the memory is shredded.  The sender and the model are faked, the cache's table is a dict."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import orjson

from omstream.crypto import PLAIN, Sealer
from omstream.engine.fold import EngineConfig
from omstream.pipeline.cache import ResultCache, sealed_lookup
from omstream.pipeline.signing import signed
from omstream.schemas.codec import decode_input, encode
from omstream.schemas.jobs import ModelJob, ModelResult
from omstream.versions import WorkerStats
from omstream.worker.model_agent import ModelAgent
from tests.helpers import engine, until
from tests.unit.crypto.keys import MemoryRing
from tests.unit.worker.test_model_agent import SECRET, TOPICS, Model, Sender, event, events_of, job

ANSWER = "* the locker code is 4711"


class Answering(Model):
    async def __call__(self, j: ModelJob) -> ModelResult:
        result = await super().__call__(j)
        return result.model_copy(update={"output": ANSWER})


def cache(sealer: Sealer) -> ResultCache:
    answers = ResultCache("unused:1", TOPICS.cache, Path("unused"), SECRET, sealer)
    answers._db = cast(Any, {})  # the local table, in memory
    return answers


def agent(sealer: Sealer, model: Model, answers: ResultCache | None = None,
          config: EngineConfig | None = None) -> ModelAgent:
    return ModelAgent(run=model, cache=answers or cache(sealer), sender=Sender(), topics=TOPICS,
                      config=config or engine(500),
                      result_key=SECRET, deadline_s=5.0, concurrency=8, stats=WorkerStats(), sealer=sealer)


async def sealed_job(sealer: Sealer, j: ModelJob) -> bytes:
    """The job as the fold writes it: its messages sealed under the memory key, deterministic."""
    key = await sealer.key_of(j.memory_key)
    return sealer.seal_with(encode(j), key, context=f"{j.cycle_id}:{j.kind}".encode())


async def results(a: ModelAgent, sealer: Sealer) -> list[ModelResult]:
    out = []
    for record, headers in a.sender.on(TOPICS.log):
        assert signed(SECRET, record.value, headers), "signed over the bytes the fold reads"
        await sealer.prepare([record.value])
        decoded = decode_input(sealer.open(record.value, record.key.decode()))
        assert isinstance(decoded, ModelResult)
        out.append(decoded)
    return out


async def test_a_sealed_job_is_opened_and_its_answer_sealed_before_signing() -> None:
    sealer = Sealer(cast(Any, MemoryRing()))
    model = Answering()
    a = agent(sealer, model)
    raw = await sealed_job(sealer, job("c1", "hash-of-the-prompt"))
    assert b'"omSealed":1' in raw
    await a.answer(event(0, raw).message)
    assert model.calls == ["c1"]
    [(record, _)] = a.sender.on(TOPICS.log)
    assert b"locker" not in record.value and b'"omSealed":1' in record.value
    [result] = await results(a, sealer)
    assert (result.ok, result.output, result.cycle_id) == (True, ANSWER, "c1")
    # The cache entry: sealed whole, under an HMAC of the request hash, signed over its bytes.
    [(entry, headers)] = a.sender.on(TOPICS.cache)
    assert entry.key == sealed_lookup(await sealer.key_of("thread:t1"), "hash-of-the-prompt")
    assert b"locker" not in entry.value and b"hash-of-the-prompt" not in entry.value and signed(SECRET, entry.value, headers)


async def test_a_job_of_a_shredded_memory_is_answered_failed_without_text() -> None:
    sealer = Sealer(cast(Any, MemoryRing()))
    model = Answering()
    a = agent(sealer, model)
    raw = await sealed_job(sealer, job("c1", "r1"))
    await sealer.shred("thread:t1")
    await a.answer(event(0, raw).message)
    assert model.calls == [] and a.shredded == 1
    [(record, _)] = a.sender.on(TOPICS.log)
    result = decode_input(record.value)
    assert isinstance(result, ModelResult) and not result.ok and result.error_code == "shredded"
    assert result.output is None and a.sender.on(TOPICS.cache) == [] and a.sender.on(TOPICS.dlq) == []


async def test_the_cache_serves_a_live_memory_and_a_replay_but_not_after_a_shred() -> None:
    sealer = Sealer(cast(Any, MemoryRing()))
    answers = cache(sealer)
    model = Answering()
    first = agent(sealer, model, answers)
    await first.answer(event(0, await sealed_job(sealer, job("c1", "same"))).message)
    # A replay of the same memory (another version's job, the same request): a hit, no call.
    live = engine(500)
    replay = agent(sealer, model, answers, EngineConfig(live.om, "v2", settled=True,
                                                        takes_attachments=live.takes_attachments))
    again = job("c1", "same").model_copy(update={"version": "v2"})
    await replay.answer(event(0, await sealed_job(sealer, again)).message)
    assert model.calls == ["c1"] and replay.stats.cache_hits == 1
    [hit] = await results(replay, sealer)
    assert (hit.cached, hit.output, hit.version) == (True, ANSWER, "v2")
    # Shredded: the entry no longer opens; the memory used again (a new key) cannot find it.
    key = await sealer.key_of("thread:t1")
    await sealer.shred("thread:t1")
    assert answers.under(key).get(job("c9", "same")) is None
    after = agent(sealer, model, answers)
    await after.answer(event(0, await sealed_job(sealer, job("c2", "same"))).message)
    assert model.calls == ["c1", "c2"]


async def test_equal_requests_of_two_memories_call_once_and_each_keeps_its_entry() -> None:
    sealer = Sealer(cast(Any, MemoryRing()))
    answers = cache(sealer)
    model = Answering(hold=("c1",))
    a = agent(sealer, model, answers)
    jobs = [await sealed_job(sealer, job("c1", "same", "t1")), await sealed_job(sealer, job("c2", "same", "t2"))]
    await a.consume(events_of(*(event(i, raw) for i, raw in enumerate(jobs))), _ack)
    await asyncio.sleep(0.05)
    model.gates["c1"].set()
    await until(lambda: len(a.sender.on(TOPICS.log)) == 2)
    one, two = await results(a, sealer)
    assert model.calls == ["c1"] and (two.memory_key, two.cached, two.output) == ("thread:t2", True, ANSWER)
    # Each memory's entry under its own key: t1's shred leaves t2's answer.
    await until(lambda: len(a.sender.on(TOPICS.cache)) == 2)
    await sealer.shred("thread:t1")
    t2 = await sealer.key_of("thread:t2")
    found = answers.under(t2).get(job("c3", "same", "t2"))
    assert found is not None and found.output == ANSWER


async def test_plain_agent_writes_todays_bytes() -> None:
    model = Answering()
    a = agent(PLAIN, model, cache(PLAIN))
    j = job("c1", "r1")
    await a.answer(event(0, encode(j)).message)
    [(record, _)] = a.sender.on(TOPICS.log)
    result = decode_input(record.value)
    assert isinstance(result, ModelResult) and record.value == encode(result) and b"locker" in record.value
    [(entry, _)] = a.sender.on(TOPICS.cache)
    assert entry.key == b"r1" and orjson.loads(entry.value)["output"] == ANSWER


async def _ack(_: Any) -> bool:
    return True


async def test_the_bulk_replay_hits_the_live_agents_entries_of_a_sealed_memory() -> None:
    from omstream.replay.bulk import CachedAnswers
    from omstream.settings import Settings

    sealer = Sealer(cast(Any, MemoryRing()))
    answers = cache(sealer)
    model = Answering()
    await agent(sealer, model, answers).answer(event(0, await sealed_job(sealer, job("c1", "same"))).message)
    live = engine(500)
    sent: list[Any] = []

    async def send(records: Any, headers: Any) -> None:
        sent.extend(records)

    bulk = CachedAnswers(Settings(), EngineConfig(live.om, "v2", settled=True, takes_attachments=live.takes_attachments),
                         answers, send, WorkerStats(), sealer)
    again = job("c1", "same").model_copy(update={"version": "v2"})
    hit = await bulk.answer(await sealed_job(sealer, again))
    assert hit is not None and (hit.cached, hit.output, hit.version) == (True, ANSWER, "v2")
    assert bulk.stats.cache_hits == 1 and model.calls == ["c1"] and sent == []
    # After a shred its job no longer opens: answered failed, without a model call or an entry.
    raw = await sealed_job(sealer, job("c2", "same"))
    await sealer.shred("thread:t1")
    gone = await bulk.answer(raw)
    assert gone is not None and (gone.ok, gone.error_code, gone.output) == (False, "shredded", None)
    assert sent == [] and model.calls == ["c1"]


async def test_a_cancelled_call_releases_the_equal_requests_waiting_for_it() -> None:
    model = Answering(hold=("c1",))
    a = agent(PLAIN, model, cache(PLAIN))
    first = asyncio.create_task(a.answer(event(0, encode(job("c1", "same", "t1"))).message))
    await until(lambda: model.calls == ["c1"])
    second = asyncio.create_task(a.answer(event(1, encode(job("c2", "same", "t2"))).message))
    await asyncio.sleep(0.05)
    assert model.calls == ["c1"]  # waits for the first
    first.cancel()
    await second
    assert model.calls == ["c1", "c2"]
    assert [cast(ModelResult, decode_input(r.value)).cycle_id for r, _ in a.sender.on(TOPICS.log)] == ["c2"]
