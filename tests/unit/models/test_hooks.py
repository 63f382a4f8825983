"""Lifecycle hooks (§13) as `Hooks` runs them: await vs non-blocking, background cycles, raising
hooks; and end to end through `om simulate`, which calls the hooks the fold asks for with the
scripted models' real usage (which hooks a cycle gets: tests/unit/engine/test_fold_hooks.py)."""

import asyncio
import logging

import pytest

from omstream.conversations.simulation import simulate
from omstream.models.hooks import Hooks
from omstream.schemas.config import load_om_config
from tests.helpers import message

CALLS: list[tuple[str, dict]] = []


def on_observation_start(payload):  # a plain function, referenced from the config below
    CALLS.append(("onObservationStart", payload))


async def on_observation_end(payload):  # an async one
    await asyncio.sleep(0)
    CALLS.append(("onObservationEnd", payload))


def on_reflection_start(payload):
    CALLS.append(("onReflectionStart", payload))


def on_reflection_end(payload):
    CALLS.append(("onReflectionEnd", payload))


@pytest.fixture(autouse=True)
def _fresh():
    CALLS.clear()
    yield
    CALLS.clear()


@pytest.mark.parametrize("execution", ["await", "non-blocking"])
async def test_a_raising_hook_is_logged_and_never_raised(caplog, execution):
    def sync_boom(_payload):
        raise RuntimeError("sync hook exploded")

    async def async_boom(_payload):
        raise ValueError("async hook exploded")

    hooks = Hooks({"onObservationStart": sync_boom, "onObservationEnd": async_boom}, execution)
    with caplog.at_level(logging.WARNING, logger="omstream.models.hooks"):
        await hooks.call("onObservationStart", {"threadId": "t1"})
        await hooks.call("onObservationEnd", {"threadId": "t1"})
        await hooks.drain()
    messages = [r.getMessage() for r in caplog.records if r.name == "omstream.models.hooks"]
    assert any("onObservationStart" in m and "sync hook exploded" in m for m in messages)
    assert any("onObservationEnd" in m and "async hook exploded" in m for m in messages)


async def test_await_mode_returns_once_the_hook_has():
    order: list[str] = []

    async def slow_end(_payload):
        await asyncio.sleep(0.05)
        order.append("hook done")

    await Hooks({"onObservationEnd": slow_end}, "await").call("onObservationEnd", {})
    order.append("call returned")
    assert order == ["hook done", "call returned"]


@pytest.mark.parametrize(("execution", "background"), [("non-blocking", False), ("await", True)])
async def test_non_blocking_hooks_and_background_cycles_hooks_are_never_waited_for(execution, background):
    gate = asyncio.Event()
    order: list[str] = []

    async def gated(_payload):
        await gate.wait()
        order.append("hook done")

    hooks = Hooks({"onObservationEnd": gated}, execution)
    await asyncio.wait_for(hooks.call("onObservationEnd", {}, background=background), timeout=30)
    order.append("call returned")
    gate.set()
    await hooks.drain()
    assert order == ["call returned", "hook done"]


async def test_a_hook_gets_a_copy_of_the_payload():
    seen = {"trigger": "turn-sync"}
    await Hooks({"onObservationStart": lambda p: p.update(trigger="changed")}, "await").call(
        "onObservationStart", seen)
    assert seen == {"trigger": "turn-sync"}


def test_simulate_calls_the_configured_hooks_once_per_cycle_with_the_models_usage():
    module = "tests.unit.models.test_hooks"
    om = load_om_config({
        "tokenCounter": "tokenx", "hookExecution": "await",
        "hooks": {"onObservationStart": f"{module}:on_observation_start",
                  "onObservationEnd": f"{module}:on_observation_end",
                  "onReflectionStart": f"{module}:on_reflection_start",
                  "onReflectionEnd": f"{module}:on_reflection_end"},
        "observation": {"model": "scripted/observer", "messageTokens": 300, "bufferTokens": False},
        "reflection": {"model": "scripted/reflector", "observationTokens": 200}})
    sim = asyncio.run(simulate([message(i) for i in range(12)], om))
    names = [name for name, _ in CALLS]
    observations = len([e for e in sim.events if e.type == "data-om-observation-start"
                        and e.data.operation_type == "observation"])
    assert names.count("onObservationStart") == names.count("onObservationEnd") == observations >= 2
    assert names.count("onReflectionStart") == names.count("onReflectionEnd") >= 1
    for i in range(0, len(CALLS), 2):  # each cycle's start, then its end
        (start, opened), (end, closed) = CALLS[i], CALLS[i + 1]
        assert end == start.replace("Start", "End") and closed.items() >= opened.items()
        assert opened == {"threadId": "t1", "resourceId": "u1", "trigger": "turn-sync", "cycleId": opened["cycleId"]}
        assert closed["usage"]["totalTokens"] > 0 and closed["providerMetadata"]["litellm"]["provider"] == "scripted"
    calls_made = sum(r.usage.total_tokens for r in sim.results)
    assert sum(payload["usage"]["totalTokens"] for name, payload in CALLS if name.endswith("End")) == calls_made


def test_hooks_load_from_the_config_and_bad_settings_are_refused():
    om = load_om_config({"hooks": {"onObservationStart": "tests.unit.models.test_hooks:on_observation_start"},
                         "hookExecution": "await"})
    hooks = Hooks.from_config(om)
    assert hooks.execution == "await" and set(hooks.functions) == {"onObservationStart"}
    assert not Hooks() and not Hooks.from_config(load_om_config({}))
    with pytest.raises(ValueError):
        Hooks({}, "sometimes")
    om = load_om_config({"hooks": {"onReflectionEnd": "tests.unit.models.test_hooks:missing_function"}})
    with pytest.raises(ValueError, match="missing_function"):
        Hooks.from_config(om)
