"""The version rules of the fold and the cache, without a broker: whose results a version applies,
what a settled version holds, what makes two requests equal."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omstream.engine.fold import EngineConfig, addressed, fold, new_state
from omstream.engine.step import config_digest
from omstream.models.calls import untimed
from omstream.pipeline.cache import answer_from
from omstream.schemas.config import load_om_config
from omstream.schemas.jobs import ChatMessage, request_hash
from omstream.settings import Settings
from omstream.topics import Topics
from tests.helpers import message, scripted_result

OPTIONS = {"observation": {"model": "scripted/observer", "messageTokens": 500, "bufferTokens": 100},
           "tokenCounter": "tokenx"}


def config(version: str = "live", settled: bool = False, **observation) -> EngineConfig:
    om = load_om_config({"observationalMemory": {**OPTIONS, "observation": {**OPTIONS["observation"], **observation}}})
    return EngineConfig(om, version, settled=settled)


def until_job(cfg: EngineConfig):
    """Fold messages until the memory has a (background) job; the state and the job."""
    state = new_state("thread:t1", "t1", "u1")
    for i in range(40):
        out = fold(state, message(i), cfg)
        state = out.state
        if out.jobs:
            return state, out.jobs[0], i
    raise AssertionError("no job")


def test_a_version_applies_its_own_results_and_a_follower_those_of_its_digest():
    live, same, other = config(), config("same"), config("other", settled=True, messageTokens=600)
    assert live.digest == same.digest != other.digest
    _, job, _ = until_job(live)
    result = scripted_result(job)
    assert addressed(result, live) and addressed(result, same)  # same digest: same decisions
    assert not addressed(result, other)  # settled: its own results only
    assert addressed(result.model_copy(update={"version": "other"}), other)
    assert not addressed(result.model_copy(update={"config_digest": other.digest}), same)


def test_another_versions_result_changes_nothing_not_even_with_an_event():
    other = config("other", settled=True)
    state, job, _ = until_job(other)
    foreign = scripted_result(job).model_copy(update={"version": "live", "config_digest": "0" * 16})
    out = fold(state, foreign, other)
    assert out.state is state and out.events == () and out.jobs == ()


def test_a_settled_version_holds_inputs_behind_a_background_job_and_a_follower_does_not():
    for settled in (False, True):
        cfg = config("v", settled=settled)
        state, job, i = until_job(cfg)
        assert job.kind == "buffer"
        after = fold(state, message(i + 1), cfg).state
        assert (len(after.held) == 1) is settled
        if settled:
            released = fold(after, scripted_result(job), cfg).state
            assert released.held == () and message(i + 1).id in {m.id for m in released.pending}


def test_the_digest_follows_the_options_and_a_sample_changes_the_request():
    assert config_digest(config().om) == config_digest(config().om)
    assert config_digest(config().om) != config_digest(config(messageTokens=501).om)
    messages = (ChatMessage(role="user", content="x"),)
    assert request_hash("m", messages, {}) == request_hash("m", messages, {}, sample=0)
    assert request_hash("m", messages, {}) != request_hash("m", messages, {}, sample=1)


def test_a_cached_answer_is_addressed_to_the_job_and_takes_no_time():
    _, job, _ = until_job(config("v", settled=True))
    cached = scripted_result(job).model_copy(update={"cycle_id": "elsewhere", "memory_key": "thread:t9",
                                                    "version": "live"})
    answer = answer_from(cached, job)
    assert (answer.cycle_id, answer.memory_key, answer.version, answer.cached) == (job.cycle_id, job.memory_key, "v", True)
    assert answer.started_at == answer.completed_at == job.created_at
    assert untimed(scripted_result(job), job).completed_at == job.created_at


def test_version_names_its_outputs_and_group_the_live_one_keeps_its_names():
    live, v = Topics("om"), Topics("om", "v2")
    assert (live.events, live.jobs, live.dlq) == ("om.events", "om.jobs", "om.dlq")
    assert (v.events, v.jobs, v.dlq, v.log, v.cache) == ("om.v.v2.events", "om.v.v2.jobs", "om.v.v2.dlq", "om.log", "om.cache")
    assert Settings().app_id == "omstream-om" and Settings(version="v2").app_id == "omstream-om.v.v2"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=0, max_value=6), min_size=60, max_size=60),
       st.lists(st.integers(min_value=20, max_value=120), min_size=60, max_size=60))
def test_a_settled_version_decides_the_same_however_late_its_results_arrive(delays, words):
    """The determinism a settled replay rests on: each result is delivered `delay` inputs after
    the job that asked for it (or at the end), and the events are those of answering at once."""
    cfg = config("v", settled=True, messageTokens=700, bufferTokens=150)
    cfg = EngineConfig(cfg.om.model_copy(update={"reflection": cfg.om.reflection.model_copy(
        update={"observation_tokens": 900})}), "v", settled=True)
    inputs = [message(i, words=w) for i, w in enumerate(words)]

    def run(delay_of) -> list:
        state, events, waiting = new_state("thread:t1", "t1", "u1"), [], []  # (due, result)
        pending = list(inputs)
        step = 0
        while pending or waiting:
            due = [w for w in waiting if w[0] <= step or not pending]
            if due:
                waiting.remove(due[0])
                out = fold(state, due[0][1], cfg)
            else:
                out = fold(state, pending.pop(0), cfg)
                step += 1
            state = out.state
            events += out.events
            waiting += [(step + delay_of(len(events)), untimed(scripted_result(job), job)) for job in out.jobs]
        return [e.wire() for e in events]

    at_once = run(lambda _: 0)
    assert any(e["type"] == "data-om-buffering-end" for e in at_once)
    assert run(lambda n: delays[n % len(delays)]) == at_once
