"""Lifecycle hooks (§13) around model jobs: payloads, await vs non-blocking, raising hooks."""

import asyncio
import logging
import random
from datetime import UTC, datetime

import pytest

from omstream.models.calls import RetryPolicy
from omstream.models.hooks import Hooks, end_payload, run_job_with_hooks, start_payload
from omstream.models.scripted import reset_failures
from omstream.schemas.config import load_om_config
from omstream.schemas.jobs import ChatMessage, ModelJob, request_hash

CALLS: list[tuple[str, dict]] = []


def on_observation_start(payload):  # a plain function, referenced from the config below
    CALLS.append(("onObservationStart", payload))


async def on_observation_end(payload):  # an async one
    await asyncio.sleep(0)
    CALLS.append(("onObservationEnd", payload))


def job(kind: str = "observe", *, model: str = "scripted/observer", settings: dict | None = None,
        trigger: str | None = "turn-sync", memory_key: str = "thread:t1") -> ModelJob:
    messages = (ChatMessage(role="system", content="observe"),
                ChatMessage(role="user", content="## New Message History to Observe\n\nMar 3 2025:\n"
                                                 "User (9:05 AM): hello there"))
    settings = settings or {}
    return ModelJob(kind=kind, cycle_id=f"c-{kind}", memory_key=memory_key, thread_id="t1",
                    generation=0, model=model, messages=messages, settings=settings,
                    request_hash=request_hash(model, messages, settings), trigger=trigger,
                    created_at=datetime(2025, 3, 3, tzinfo=UTC))


async def no_sleep(_seconds: float) -> None:
    return None


def recorder(calls: list, name: str):
    def hook(payload):
        calls.append((name, payload))
    return hook


def all_hooks(calls: list, execution: str = "await") -> Hooks:
    names = ("onObservationStart", "onObservationEnd", "onReflectionStart", "onReflectionEnd")
    return Hooks({name: recorder(calls, name) for name in names}, execution)


async def run(j: ModelJob, hooks: Hooks, policy: RetryPolicy = RetryPolicy(retries=0)):
    return await run_job_with_hooks(j, policy, hooks, rng=random.Random(1), sleep=no_sleep)


@pytest.fixture(autouse=True)
def _fresh():
    CALLS.clear()
    reset_failures()
    yield
    reset_failures()


async def test_observation_hooks_get_trigger_usage_and_provider_metadata():
    calls: list = []
    result = await run(job(), all_hooks(calls))
    assert result.ok
    assert [name for name, _ in calls] == ["onObservationStart", "onObservationEnd"]
    start, end = calls[0][1], calls[1][1]
    assert start == {"threadId": "t1", "trigger": "turn-sync"}
    assert end["threadId"] == "t1" and end["trigger"] == "turn-sync" and "error" not in end
    assert end["usage"] == {"inputTokens": result.usage.input_tokens,
                            "outputTokens": result.usage.output_tokens,
                            "totalTokens": result.usage.total_tokens}
    assert end["usage"]["totalTokens"] > 0
    assert end["providerMetadata"]["litellm"]["provider"] == "scripted"


async def test_reflection_jobs_call_reflection_hooks_and_extract_jobs_none():
    calls: list = []
    hooks = all_hooks(calls)
    await run(job("reflect", model="scripted/reflector", trigger="manual"), hooks)
    assert [name for name, _ in calls] == ["onReflectionStart", "onReflectionEnd"]
    assert calls[0][1]["trigger"] == "manual"
    calls.clear()
    await run(job("extract"), hooks)
    assert calls == []


def test_payloads_name_the_resource_and_infer_a_missing_trigger():
    resource = job(memory_key="resource:u1", trigger=None)
    assert start_payload(resource) == {"threadId": "t1", "resourceId": "u1", "trigger": "turn-sync"}
    assert start_payload(job("buffer", trigger=None))["trigger"] == "async-buffer"
    assert start_payload(job("buffer-reflection", trigger="async-buffer"))["trigger"] == "async-buffer"


async def test_a_failed_job_reports_its_error_to_the_end_hook():
    calls: list = []
    failing = job(settings={"failWith": "401"})
    result = await run(failing, all_hooks(calls))
    assert not result.ok
    end = calls[-1][1]
    assert end["error"] == result.error and "AuthenticationError" in end["error"]
    assert "usage" not in end
    assert end_payload(failing, result) == end


@pytest.mark.parametrize("execution", ["await", "non-blocking"])
async def test_a_raising_hook_is_logged_and_the_job_still_succeeds(caplog, execution):
    def sync_boom(_payload):
        raise RuntimeError("sync hook exploded")

    async def async_boom(_payload):
        raise ValueError("async hook exploded")

    hooks = Hooks({"onObservationStart": sync_boom, "onObservationEnd": async_boom}, execution)
    with caplog.at_level(logging.WARNING, logger="omstream.models.hooks"):
        result = await run(job(), hooks)
        await hooks.drain()
    assert result.ok and result.output
    messages = [r.getMessage() for r in caplog.records if r.name == "omstream.models.hooks"]
    assert any("onObservationStart" in m and "sync hook exploded" in m for m in messages)
    assert any("onObservationEnd" in m and "async hook exploded" in m for m in messages)


async def test_await_mode_waits_for_hooks_before_returning():
    order: list[str] = []

    async def slow_end(_payload):
        await asyncio.sleep(0.05)
        order.append("hook done")

    result = await run(job(), Hooks({"onObservationEnd": slow_end}, "await"))
    order.append("job returned")
    assert result.ok and order == ["hook done", "job returned"]


async def test_non_blocking_mode_never_waits_for_hooks():
    gate = asyncio.Event()
    order: list[str] = []

    async def gated_start(_payload):
        await gate.wait()
        order.append("start hook done")

    hooks = Hooks({"onObservationStart": gated_start})  # 'non-blocking' is the default
    assert hooks.execution == "non-blocking"
    result = await asyncio.wait_for(run(job(), hooks), timeout=30)
    order.append("job returned")
    gate.set()
    await hooks.drain()
    assert result.ok and order == ["job returned", "start hook done"]


async def test_async_buffer_jobs_never_wait_even_in_await_mode():
    gate = asyncio.Event()
    order: list[str] = []

    async def gated_end(_payload):
        await gate.wait()
        order.append("end hook done")

    hooks = Hooks({"onObservationEnd": gated_end}, "await")
    result = await asyncio.wait_for(run(job("buffer", trigger="async-buffer"), hooks), timeout=30)
    order.append("job returned")
    gate.set()
    await hooks.drain()
    assert result.ok and order == ["job returned", "end hook done"]


async def test_hooks_load_from_the_config_references():
    om = load_om_config({"hooks": {"onObservationStart": "tests.unit.models.test_hooks:on_observation_start",
                                   "onObservationEnd": "tests.unit.models.test_hooks:on_observation_end"},
                         "hookExecution": "await"})
    hooks = Hooks.from_config(om)
    assert hooks.execution == "await" and set(hooks.functions) == {"onObservationStart", "onObservationEnd"}
    result = await run(job(), hooks)
    assert result.ok and [name for name, _ in CALLS] == ["onObservationStart", "onObservationEnd"]
    assert CALLS[1][1]["usage"]["totalTokens"] > 0


def test_no_hooks_and_bad_settings():
    assert not Hooks() and not Hooks.from_config(load_om_config({}))
    with pytest.raises(ValueError):
        Hooks({}, "sometimes")
    om = load_om_config({"hooks": {"onReflectionEnd": "tests.unit.models.test_hooks:missing_function"}})
    with pytest.raises(ValueError, match="missing_function"):
        Hooks.from_config(om)
