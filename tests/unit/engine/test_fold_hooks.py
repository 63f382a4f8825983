"""Lifecycle hooks through the fold (spec §13): one start and one end per cycle, whatever the cycle
took, the end's usage summed over every model call of the cycle, its error set whenever the
cycle failed, and `resourceId` in every scope."""

from datetime import timedelta

from omstream.engine.fold import fold, new_state
from omstream.schemas.control import ObserveRequested
from omstream.schemas.jobs import ModelJob, ModelResult, Usage
from tests.helpers import T0, engine, fold_inputs, message, scripted_result, until_a_job
from tests.unit.engine.resource_helpers import Memory, resource_engine, say

METADATA = {"litellm": {"provider": "scripted", "cost": 0.25}}
LOOP = "\n".join(["* 🔴 (09:00) " + "the assistant repeats itself over and over again without end " * 2] * 300)


def paid(job: ModelJob, **answer) -> ModelResult:
    """The scripted answer to `job`, as a provider would bill it: 100 tokens in, 10 out."""
    return scripted_result(job, **answer).model_copy(update={
        "usage": Usage(input_tokens=100, output_tokens=10, total_tokens=110), "provider_metadata": METADATA})


def calls(*outs) -> list[tuple[str, dict]]:
    """The hook calls of the folds `outs`, without their `cycleId`."""
    return [(call.name, {k: v for k, v in call.payload.items() if k != "cycleId"}) for out in outs for call in out.hooks]


def usage(calls_made: int) -> dict:
    return {"inputTokens": 100 * calls_made, "outputTokens": 10 * calls_made, "totalTokens": 110 * calls_made}


def observing(cfg):
    """Messages up to a blocking observation: (state, its job, the fold that started it)."""
    state, started = until_a_job(cfg)
    [job] = started.jobs
    return state, job, started


def test_an_observation_calls_its_start_hook_when_it_starts_and_its_end_hook_with_the_spend():
    cfg = engine(500)
    state, job, started = observing(cfg)
    ended = fold(state, paid(job), cfg)
    assert calls(started, ended) == [
        ("onObservationStart", {"threadId": "t1", "resourceId": "u1", "trigger": "turn-sync"}),
        ("onObservationEnd", {"threadId": "t1", "resourceId": "u1", "trigger": "turn-sync",
                              "usage": usage(1), "providerMetadata": METADATA})]
    assert not any(call.background for call in (*started.hooks, *ended.hooks))
    [start] = [e for e in started.events if e.type == "data-om-observation-start"]
    assert started.hooks[0].payload["cycleId"] == ended.hooks[0].payload["cycleId"] == start.data.cycle_id


def test_a_failed_call_ends_the_cycle_with_its_error():
    cfg = engine(500)
    state, job, _ = observing(cfg)
    ended = fold(state, paid(job, ok=False, error="HTTP 500"), cfg)
    [(name, payload)] = calls(ended)
    assert name == "onObservationEnd" and payload["error"] == "HTTP 500"


def test_a_looping_answer_asked_again_is_one_cycle_and_its_error_ends_it():
    cfg = engine(500)
    state, job, _ = observing(cfg)
    again = fold(state, paid(job, output=f"<observations>\n{LOOP}\n</observations>"), cfg)
    assert calls(again) == [] and [j.kind for j in again.jobs] == ["observe"]  # asked once more
    ended = fold(again.state, paid(again.jobs[0], output=f"<observations>\n{LOOP}\n</observations>"), cfg)
    [(name, payload)] = calls(ended)
    assert name == "onObservationEnd" and payload["usage"] == usage(2)
    assert payload["error"] == "Observer produced degenerate output"


def test_a_model_by_input_tokens_overflow_calls_both_hooks_with_the_error():
    cfg = engine(500, observation={"model": {"upTo": {"100": "scripted/observer"}}})
    state, _, jobs, _ = fold_inputs([message(i) for i in range(5)], cfg)
    out = fold(state, message(5), cfg)
    assert jobs == [] and out.jobs == ()
    [(start, _), (end, payload)] = calls(out)
    assert (start, end) == ("onObservationStart", "onObservationEnd")
    assert "exceeds the largest configured threshold (100)" in payload["error"] and "usage" not in payload


def test_a_reflection_ladder_is_one_cycle_with_every_rung_summed():
    cfg = engine(500, reflection={"observationTokens": 60})
    state, job, _ = observing(cfg)
    observed = fold(state, paid(job), cfg)  # the log is over 60 tokens: a reflection starts
    assert [name for name, _ in calls(observed)] == ["onObservationEnd", "onReflectionStart"]
    assert calls(observed)[1][1] == {"threadId": "t1", "resourceId": "u1", "trigger": "turn-sync"}
    log = observed.state.observations
    rung = fold(observed.state, paid(observed.jobs[0], output=f"<observations>\n{log}\n</observations>"), cfg)
    assert [e.type for e in rung.events][:2] == ["data-om-observation-failed", "data-om-observation-start"]
    assert calls(rung) == []  # the log shows a failed rung and a new one; the hooks, nothing
    done = fold(rung.state, paid(rung.jobs[0], output="<observations>\nDate: Mar 3, 2025\n* short\n</observations>"),
                cfg)
    [(name, payload)] = calls(done)
    assert name == "onReflectionEnd" and "error" not in payload
    assert done.hooks[0].payload["cycleId"] == observed.hooks[1].payload["cycleId"]  # the first rung's
    assert payload["usage"] == usage(2)
    assert payload["providerMetadata"] == {"litellm": {"provider": "scripted", "cost": 0.5}}  # the costs summed


def test_a_structured_extractors_follow_up_is_part_of_the_cycles_spend():
    profile = {"name": "Profile", "instructions": "The user's profile.",
               "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}
    cfg = engine(300, observation={"extract": [profile]})
    state, job, _ = observing(cfg)
    waiting = fold(state, paid(job), cfg)
    assert calls(waiting) == [] and [j.kind for j in waiting.jobs] == ["extract"]
    ended = fold(waiting.state, paid(waiting.jobs[0], output='{"profile": {"name": "Ann"}}'), cfg)
    [(name, payload)] = calls(ended)
    assert name == "onObservationEnd" and payload["usage"] == usage(2)


def test_a_resource_memorys_parallel_batches_are_one_cycle_with_the_resource_named():
    memory = Memory(resource_engine(100_000, observation={"maxTokensPerBatch": 200}))
    for n in range(8):
        memory.feed(say(n, ("thread-a", "thread-b", "thread-c", "thread-d")[n % 4], words=60))
    started = fold(memory.state, ObserveRequested(thread_id="thread-a", at=T0), memory.config)
    assert len(started.jobs) == 4, "one job per batch"
    assert calls(started) == [("onObservationStart", {"threadId": "thread-a", "resourceId": "u1",
                                                      "trigger": "manual"})]
    state, hooks = started.state, []
    for job in reversed(started.jobs):
        out = fold(state, paid(job), memory.config)
        state = out.state
        hooks += calls(out)
    [(name, payload)] = hooks
    assert name == "onObservationEnd" and payload["usage"] == usage(4) and payload["resourceId"] == "u1"


def test_a_buffered_chunk_superseded_before_its_answer_ends_with_that_error_in_the_background():
    cfg = engine(1000, observation={"bufferTokens": 0.2})
    state = new_state("thread:t1", "t1", "u1")
    out = None
    for i in range(4):
        out = fold(state, message(i, words=80), cfg)
        state = out.state
        if out.jobs:
            break
    assert out is not None and [j.kind for j in out.jobs] == ["buffer"]
    [(name, payload)] = calls(out)
    assert (name, payload["trigger"]) == ("onObservationStart", "async-buffer") and out.hooks[0].background
    buffer_job = out.jobs[0]
    manual = fold(state, ObserveRequested(thread_id="t1", at=T0 + timedelta(minutes=5)), cfg)
    observed = fold(manual.state, paid(manual.jobs[0]), cfg)
    late = fold(observed.state, paid(buffer_job), cfg)
    [(name, payload)] = calls(late)
    assert name == "onObservationEnd" and payload["error"].startswith("superseded")
    assert payload["trigger"] == "async-buffer" and late.hooks[0].background
