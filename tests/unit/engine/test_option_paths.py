"""Options the audit of the product documentation found untested through the fold: the Observer's
and the Reflector's `instruction` reaching their prompts, and a failed observation buffer
reported as `data-om-buffering-failed`."""

from datetime import timedelta

import pytest

from omstream.engine.fold import fold, new_state
from omstream.schemas.control import StepStarted
from omstream.schemas.messages import MessageMetadata
from tests.helpers import engine, message, scripted_result

OBSERVER_NOTE = "Always record the user's budget in euros."
REFLECTOR_NOTE = "Keep every date the user gave, even old ones."


class Loop:
    """Folds inputs and answers jobs with the scripted models (or fails the ones asked)."""

    def __init__(self, config) -> None:
        self.config, self.state = config, new_state("thread:t1", "t1", "u1")
        self.events, self.jobs = [], []

    def __call__(self, item) -> None:
        out = fold(self.state, item, self.config)
        self.state = out.state
        self.events += out.events
        self.jobs += out.jobs

    def settle(self, fail: set[str] = frozenset()) -> None:
        done = 0
        while done < len(self.jobs):
            job = self.jobs[done]
            done += 1
            failed = job.kind in fail
            self(scripted_result(job, ok=not failed, error="model unavailable" if failed else None))


def turn(loop: Loop, i: int, words: int, fail: set[str] = frozenset(), model: str | None = None) -> None:
    """A message and its step; with `model`, the assistant's messages say they came from it (the
    memory learns the actor's last model from its messages)."""
    said = message(i, words=words)
    if model is not None and said.role == "assistant":
        provider, _, name = model.partition("/")
        said = said.model_copy(update={"metadata": MessageMetadata(provider=provider, model=name)})
    loop(said)
    loop(StepStarted(thread_id="t1", step_number=0, at=message(i).created_at, after_message_id=f"t1-m{i}",
                     model=model))
    loop.settle(fail)


def system_prompt(job) -> str:
    return str(job.messages[0].content)


def test_the_observer_and_reflector_instructions_reach_their_prompts():
    loop = Loop(engine(200, observation={"instruction": OBSERVER_NOTE},
                       reflection={"instruction": REFLECTOR_NOTE, "observationTokens": 150}))
    for i in range(8):
        turn(loop, i, words=120)
    kinds = {job.kind for job in loop.jobs}
    assert {"observe", "reflect"} <= kinds, kinds
    for job in loop.jobs:
        if job.kind == "observe":
            assert OBSERVER_NOTE in system_prompt(job) and REFLECTOR_NOTE not in system_prompt(job)
        if job.kind == "reflect":
            assert REFLECTOR_NOTE in system_prompt(job) and OBSERVER_NOTE not in system_prompt(job)


def test_without_an_instruction_the_prompts_hold_neither_note():
    loop = Loop(engine(200, reflection={"observationTokens": 150}))
    for i in range(8):
        turn(loop, i, words=120)
    assert loop.jobs and not any(OBSERVER_NOTE in system_prompt(j) or REFLECTOR_NOTE in system_prompt(j)
                                 for j in loop.jobs)


def test_a_failed_observation_buffer_is_reported_as_buffering_failed_and_the_memory_goes_on():
    loop = Loop(engine(600, observation={"bufferTokens": 0.2}, checkThresholdsAt="step"))
    turn(loop, 0, words=120, fail={"buffer"})  # over one 120-token interval
    failed = [e for e in loop.events if e.type == "data-om-buffering-failed"]
    assert len(failed) == 1, [e.type for e in loop.events]
    data = failed[0].data
    assert data.operation_type == "observation" and "model unavailable" in data.error
    started = [e for e in loop.events if e.type == "data-om-buffering-start"]
    assert [s.data.cycle_id for s in started] == [data.cycle_id]
    assert loop.state.chunks == () or not loop.state.chunks
    # The next interval buffers again, and that chunk holds the messages the failed one did not keep.
    turn(loop, 1, words=120)
    ends = [e for e in loop.events if e.type == "data-om-buffering-end"]
    assert len(ends) == 1 and len(loop.state.chunks) == 1
    assert "t1-m0" in loop.state.chunks[0].message_ids


def reflection_loop(**reflection) -> Loop:
    return Loop(engine(200, observation={"bufferTokens": 0.2}, checkThresholdsAt="step",
                       reflection={"observationTokens": 400, "bufferActivation": 0.5, **reflection}))


def early_activation(loop: Loop, step: StepStarted) -> list:
    """The reflection activations `step` would cause, folded on a copy of the loop."""
    probe = Loop(loop.config)
    probe.state = loop.state
    probe(step)
    return [e for e in probe.events if e.type == "data-om-activation" and e.data.operation_type == "reflection"]


def until_early_activation(loop: Loop, step_at, model: str | None = None) -> tuple[int, list, list]:
    """Turns until the buffered reflection would activate early at `step_at(i)`; the turn, the
    early activations and those a step one minute on (not idle, same model) would cause."""
    for i in range(20):
        turn(loop, i, words=60, model=model)
        assert not any(e.type == "data-om-activation" and e.data.operation_type == "reflection"
                       for e in loop.events), "reached the threshold first"
        if loop.state.buffered_reflection is None:
            continue
        early = early_activation(loop, step_at(i))
        if early:
            soon = StepStarted(thread_id="t1", step_number=0, at=message(i).created_at + timedelta(minutes=1),
                               model=model)
            return i, early, early_activation(loop, soon)
    raise AssertionError("the buffered reflection never activated early")


def test_reflection_activate_after_idle_swaps_the_buffered_reflection_in_after_the_idle_time():
    loop = reflection_loop(activateAfterIdle="5m")
    i, early, soon = until_early_activation(
        loop, lambda i: StepStarted(thread_id="t1", step_number=0, at=message(i).created_at + timedelta(minutes=6)))
    assert loop.state.observation_tokens < 400  # below the threshold: only the idle time triggers it
    assert [a.data.triggered_by for a in early] == ["ttl"] and soon == []
    assert early[0].data.cycle_id == loop.state.buffered_reflection.cycle_id


def test_reflection_activate_on_provider_change_swaps_the_buffered_reflection_in_when_the_model_changes():
    loop = reflection_loop(activateOnProviderChange=True)
    i, early, soon = until_early_activation(
        loop, lambda i: StepStarted(thread_id="t1", step_number=0, at=message(i).created_at + timedelta(seconds=1),
                                    model="anthropic/claude-sonnet-4"), model="openai/gpt-4o")
    assert [a.data.triggered_by for a in early] == ["provider_change"] and soon == []
    assert loop.state.observation_tokens < 400


@pytest.mark.parametrize("budget", [2_000, False])
def test_the_observer_reads_a_pending_buffered_reflection_in_place_of_the_lines_it_covers(budget):
    # previousObserverTokens (2,000 by default) with a reflection buffered but not activated yet:
    # the Observer's previous observations are the log as it will read once that activates;
    # without a budget (false) the Observer reads the log as it is.
    loop = Loop(engine(200, observation={"bufferTokens": 0.2, "previousObserverTokens": budget},
                       checkThresholdsAt="step", reflection={"observationTokens": 400, "bufferActivation": 0.5}))
    for i in range(20):
        pending, log, seen = loop.state.buffered_reflection, loop.state.observations, len(loop.jobs)
        turn(loop, i, words=60)
        asked = [j for j in loop.jobs[seen:] if j.kind in ("observe", "buffer")]
        if pending is not None and asked:  # asked while the reflection was pending
            break
    else:
        raise AssertionError("no observation while a buffered reflection was pending")
    prompt = str(asked[0].messages[1].content)
    reflected = [line for line in log.split("\n")[:pending.line_count] if line.strip()]
    replaced = [line for line in reflected if line not in pending.text]
    assert replaced
    if budget:
        assert pending.text.strip().split("\n")[0] in prompt
        assert not any(line in prompt for line in replaced), "a reflected line was shown"
    else:
        assert all(line in prompt for line in replaced)
