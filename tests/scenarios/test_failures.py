"""Model failures on the real path (fold -> job -> litellm -> scripted provider -> result -> fold).

Each kind of failure produces the right `-failed` event, is retried as configured, and leaves
the messages unobserved for the next cycle, which then observes them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from omstream.conversations.simulation import Simulation, settle, simulate
from omstream.engine.step import EngineConfig
from omstream.models.calls import RetryPolicy
from omstream.models.hooks import Hooks
from omstream.models.scripted import reset_failures
from omstream.schemas.config import load_om_config
from omstream.schemas.control import ObserveRequested
from omstream.schemas.messages import Message
from tests.helpers import T0, text_of


def conversation(turns: int = 6) -> list[Message]:
    out = []
    for i in range(turns):
        at = T0 + timedelta(minutes=i)
        out.append(Message(id=f"u{i}", thread_id="t", role="user", content=text_of(60, i), created_at=at))
        out.append(Message(id=f"a{i}", thread_id="t", role="assistant", content=text_of(60, i + 50),
                           created_at=at + timedelta(seconds=20)))
    return out


def run(fail_with: str, fail_times: int, retries: int):
    reset_failures()
    om = load_om_config({"observation": {
        "model": "scripted/observer", "messageTokens": 300, "bufferTokens": False,
        "modelSettings": {"failWith": fail_with, "failTimes": fail_times},
    }, "tokenCounter": "tokenx"})
    policy = RetryPolicy(retries=retries, base_ms=1, cap_ms=2)
    return asyncio.run(simulate(conversation(), om, policy=policy))


def kinds(sim):
    return [(e.type.removeprefix("data-om-"), getattr(e.data, "error", None)) for e in sim.events
            if e.type != "data-om-status"]


@pytest.mark.parametrize(("fail_with", "text"), [
    ("timeout", "Timeout"), ("429", "RateLimit"), ("500", "InternalServerError"),
])
def test_transient_errors_are_retried_and_the_cycle_succeeds(fail_with, text):
    sim = run(fail_with, fail_times=2, retries=2)
    assert not [k for k in kinds(sim) if k[0].endswith("failed")]
    assert all(r.ok and r.attempts == 3 for r in sim.results)
    assert sum(k[0] == "observation-end" for k in kinds(sim)) >= 2


@pytest.mark.parametrize(("fail_with", "text"), [
    ("timeout", "Timeout"), ("429", "RateLimit"), ("500", "InternalServerError"),
])
def test_exhausted_retries_fail_the_cycle_and_leave_the_messages_for_the_next(fail_with, text):
    sim = run(fail_with, fail_times=3, retries=2)  # three failed attempts per request: every cycle fails
    failed = [e for e in sim.events if e.type == "data-om-observation-failed"]
    starts = [e for e in sim.events if e.type == "data-om-observation-start"]
    assert failed and len(failed) == len(starts) and all(text in e.data.error for e in failed)
    assert all(not r.ok and r.attempts == 3 and r.error_code for r in sim.results)
    # Each check tries again with everything still unobserved: the tail only grows.
    assert [e.data.tokens_to_observe for e in starts] == sorted(e.data.tokens_to_observe for e in starts)
    assert_next_cycle_observes_everything(sim)


def assert_next_cycle_observes_everything(sim) -> None:
    """Nothing was observed; once the model answers again, one cycle observes every message."""
    assert list(sim.states["thread:t"].pending_ids) == [m.id for m in conversation()]
    healthy = Simulation(EngineConfig(load_om_config({"observation": {
        "model": "scripted/observer", "messageTokens": 300, "bufferTokens": False},
        "tokenCounter": "tokenx"})), states=dict(sim.states))
    jobs = healthy.feed(ObserveRequested(thread_id="t", at=T0 + timedelta(hours=1)))
    asyncio.run(settle(healthy, jobs, RetryPolicy(retries=0), Hooks(), False))
    end = next(e for e in healthy.events if e.type == "data-om-observation-end")
    assert list(end.data.observed_message_ids) == [m.id for m in conversation()]
    assert healthy.states["thread:t"].pending == ()


@pytest.mark.parametrize(("fail_with", "calls", "error"), [
    ("malformed", 1, "Observer returned no observations"),
    ("degenerate", 2, "Observer produced degenerate output"),  # regenerated once (spec 7.7)
])
def test_unusable_answers_fail_and_leave_the_messages(fail_with, calls, error):
    sim = run(fail_with, fail_times=calls, retries=3)  # every distinct request gets bad answers
    failed = [e for e in sim.events if e.type == "data-om-observation-failed"]
    starts = [e for e in sim.events if e.type == "data-om-observation-start"]
    assert failed and all(e.data.error == error for e in failed) and len(failed) == len(starts)
    # An answer is not a transient error: never retried, only a loop is asked for once more.
    assert len(sim.results) == calls * len(starts)
    assert all(r.ok and r.attempts == 1 for r in sim.results)
    assert_next_cycle_observes_everything(sim)


def test_a_permanent_error_is_not_retried():
    sim = run("401", fail_times=1, retries=5)
    failed = [e for e in sim.events if e.type == "data-om-observation-failed"]
    assert failed and all("Authentication" in e.data.error for e in failed)
    assert all(r.attempts == 1 and (r.error_code, r.error_status) == ("auth", 401) for r in sim.results)
