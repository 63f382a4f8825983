"""Calls at once per model, rate-limit answers, and the job deadline that skips the queue."""

import asyncio
import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from omstream.models.admission import ModelGate, job_deadline, parse_model_limits, queued, retry_after
from omstream.models.calls import RetryPolicy, run_job
from omstream.models.scripted import reset_failures
from omstream.pipeline.answering import answer_job
from omstream.schemas.codec import encode
from omstream.settings import SettingsError, load_settings
from tests.unit.models.test_model_calls import FakeSleep, job


@pytest.fixture(autouse=True)
def _fresh_failure_counts():
    reset_failures()
    yield
    reset_failures()


class Headers(Exception):
    def __init__(self, headers):
        super().__init__("429")
        self.headers = headers


def test_retry_after_reads_milliseconds_seconds_and_dates_through_causes():
    assert retry_after(Headers({"retry-after-ms": "1500"})) == 1.5
    assert retry_after(Headers({"Retry-After": "7"})) == 7.0
    at = datetime(2026, 12, 2, 12, 0, 30, tzinfo=UTC)
    assert retry_after(Headers({"retry-after": format_datetime(at, usegmt=True)}),
                       now=datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC).timestamp()) == 30.0
    assert retry_after(Headers({"retry-after": "soon"})) is None
    assert retry_after(Headers({})) is None and retry_after(ValueError("no headers")) is None
    wrapped = RuntimeError("call failed")
    wrapped.__cause__ = Headers({"retry-after": "2"})
    assert retry_after(wrapped) == 2.0


def test_a_rate_limited_call_waits_what_the_provider_asks_and_narrows_the_model():
    """Through litellm's real path: the scripted provider's 429 carries `retry-after-ms`."""
    gate, sleep = ModelGate(8), FakeSleep()
    result = asyncio.run(run_job(job("scripted/observer", {"failWith": "429", "failTimes": 2, "retryAfterMs": 3000}),
                                 RetryPolicy(base_ms=10), rng=random.Random(1), sleep=sleep, gate=gate))
    print("waits", sleep.delays, "calls at once now", gate.allowed("scripted/observer"))
    assert result.ok and result.attempts == 3
    assert sleep.delays == [3.0, 3.0]  # the provider's 3 s, not the policy's 10-20 ms
    assert gate.allowed("scripted/observer") == 2  # halved twice: 8 -> 4 -> 2


def test_retry_after_is_capped_by_the_policy():
    sleep = FakeSleep()
    asyncio.run(run_job(job("scripted/observer", {"failWith": "429", "failTimes": 1, "retryAfterMs": 600_000}),
                        RetryPolicy(base_ms=10, cap_ms=5000), rng=random.Random(1), sleep=sleep))
    assert sleep.delays == [5.0]


async def _peak(gate: ModelGate, model: str, calls: int) -> int:
    running, peak = 0, 0

    async def call() -> None:
        nonlocal running, peak
        async with gate.slot(model):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1

    await asyncio.gather(*(call() for _ in range(calls)))
    return peak


def test_each_model_has_its_own_limit():
    gate = ModelGate(5, parse_model_limits("openai/gpt-4o-mini=2, anthropic/claude=3"))

    async def both() -> tuple[int, int, int]:
        return await asyncio.gather(_peak(gate, "openai/gpt-4o-mini", 12), _peak(gate, "anthropic/claude", 12),
                                    _peak(gate, "gemini/gemini-2.5-flash", 12))

    assert asyncio.run(both()) == [2, 3, 5]


def test_a_rate_limit_halves_the_window_pauses_the_model_then_answers_widen_it():
    gate = ModelGate(8)

    async def scenario() -> tuple[float, int, list[int]]:
        loop = asyncio.get_running_loop()
        gate.rate_limited("m", 0.2)
        started = loop.time()
        async with gate.slot("m"):
            waited = loop.time() - started
        peak = await _peak(gate, "m", 12)
        windows = []
        for _ in range(4 + 5 + 6):
            await gate.answered("m")
            windows.append(gate.allowed("m"))
        return waited, peak, windows

    waited, peak, windows = asyncio.run(scenario())
    print(f"held {waited:.3f}s; window after answers: {windows}")
    assert waited >= 0.19  # new calls held for the provider's Retry-After
    assert peak == 4  # 8 halved
    # a window's worth of answers widens it by one: 4 answers -> 5, 5 more -> 6, 6 more -> 7
    assert windows[3] == 5 and windows[8] == 6 and windows[14] == 7
    for _ in range(40):
        asyncio.run(gate.answered("m"))
    assert gate.allowed("m") == 8  # never past the limit


def test_the_deadline_does_not_count_the_wait_for_a_slot():
    async def waits_in_queue_then_calls(queue_s: float, call_s: float) -> str:
        async with job_deadline(0.3):
            async with queued():
                await asyncio.sleep(queue_s)
            await asyncio.sleep(call_s)
        return "answered"

    assert asyncio.run(waits_in_queue_then_calls(0.6, 0.1)) == "answered"
    with pytest.raises(TimeoutError):
        asyncio.run(waits_in_queue_then_calls(0.0, 0.6))
    with pytest.raises(TimeoutError):  # time already spent before the queue still counts
        async def spent_then_queued() -> None:
            async with job_deadline(0.3):
                await asyncio.sleep(0.2)
                async with queued():
                    await asyncio.sleep(0.3)
                await asyncio.sleep(0.2)
        asyncio.run(spent_then_queued())


def test_a_job_queued_behind_a_busy_model_still_gets_its_answer():
    """One slot, three jobs of 0.2 s, a deadline of 0.3 s: the third job queues 0.4 s, within its
    deadline since only its own call counts (it failed 'deadline' before)."""
    gate = ModelGate(1)
    j = job("scripted/observer")

    async def run(_job):
        async with gate.slot("m"):
            await asyncio.sleep(0.2)
            return "answer"

    async def three() -> list:
        return await asyncio.gather(*(answer_job(encode(j), run, 0.3) for _ in range(3)))

    assert asyncio.run(three()) == ["answer"] * 3


def test_model_limits_setting_is_checked(tmp_path):
    assert parse_model_limits(" a/b=2 ,c=10,") == {"a/b": 2, "c": 10}
    for bad in ("a/b", "a/b=0", "=3", "a/b=x"):
        with pytest.raises(ValueError, match="model=N"):
            parse_model_limits(bad)
    settings = load_settings(env={"OM_MODEL_LIMITS": "openai/gpt-4o=8"})
    assert settings.model_limits == "openai/gpt-4o=8" and settings.model_concurrency == 32
    with pytest.raises(SettingsError, match="OM_MODEL_LIMITS: expected model=N"):
        load_settings(env={"OM_MODEL_LIMITS": "openai/gpt-4o"})
