"""Every model job gets an answer (omstream.pipeline.answering.answer_job): unreadable jobs, jobs whose run
raises and jobs past their deadline answer with a failed result, so no cycle waits forever."""

import asyncio
import time

import orjson

from omstream.models.calls import RetryPolicy, run_job, warm_up
from omstream.pipeline.answering import answer_job
from omstream.schemas.codec import encode
from omstream.schemas.jobs import ModelResult
from tests.unit.models.test_model_calls import job


def answer(raw: bytes, run, deadline_s: float = 5.0):
    return asyncio.run(answer_job(raw, run, deadline_s))


async def never(j):  # pragma: no cover - must not be called
    raise AssertionError("an unreadable job is not run")


def test_an_unreadable_job_with_its_cycle_answers_failed():
    raw = orjson.dumps({**orjson.loads(encode(job("scripted/observer"))), "messages": "oops"})
    result = answer(raw, never)
    assert isinstance(result, ModelResult) and not result.ok and result.error_code == "invalid-job"
    assert (result.cycle_id, result.memory_key, result.kind) == ("c1", "thread:t", "observe")
    assert result.error.startswith("the model job could not be read")
    partial = answer(orjson.dumps({"memoryKey": "thread:x", "cycleId": "c9", "kind": "??"}), never)
    assert (partial.cycle_id, partial.thread_id, partial.kind) == ("c9", "x", "observe")


def test_a_job_without_a_cycle_to_answer_is_a_reason_to_dead_letter():
    assert answer(b"{not json", never).startswith("invalid model job")
    assert answer(orjson.dumps({"cycleId": "c1"}), never).startswith("invalid model job")


def test_a_run_that_raises_answers_failed():
    async def broken(j):
        raise RuntimeError("hook exploded")

    result = answer(encode(job("scripted/observer")), broken)
    assert not result.ok and result.error_code == "error" and "hook exploded" in result.error


def test_a_model_that_never_answers_fails_at_the_deadline():
    warm_up()  # litellm's import blocks the event loop; not part of what is timed here
    hanging = job("scripted/observer", {"failWith": "hang"})
    started = time.monotonic()
    result = answer(encode(hanging), lambda j: run_job(j, RetryPolicy(retries=0)), deadline_s=0.3)
    assert time.monotonic() - started < 20  # the hang is an hour
    assert not result.ok and result.error_code == "deadline" and "300 ms" in result.error
    assert (result.cycle_id, result.request_hash) == ("c1", hanging.request_hash)


def test_a_normal_job_is_answered_by_the_model():
    result = answer(encode(job("scripted/observer")), lambda j: run_job(j, RetryPolicy(retries=0)))
    assert result.ok and "Lisbon" in result.output
