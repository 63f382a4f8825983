"""`enabled: false`: messages are kept and reach the agent raw, and no cycle ever runs."""

from omstream.schemas.control import ObserveRequested, ReflectRequested, StepStarted, TurnEnded
from tests.helpers import T0, engine, fold_inputs, message


def run(config, inputs):
    return fold_inputs(inputs, config)


def conversation(n: int) -> list:
    inputs = []
    for i in range(n):
        inputs.append(message(i, words=200))
        inputs.append(StepStarted(thread_id="t1", step_number=0, at=T0, after_message_id=f"t1-m{i}"))
    return [*inputs, TurnEnded(thread_id="t1", at=T0)]


def test_a_disabled_memory_runs_no_cycle_and_keeps_every_message_pending():
    config = engine(300, enabled=False, observation={"bufferTokens": 0.2, "bufferOnIdle": True})
    state, events, jobs, rejected = run(config, conversation(20))
    assert (jobs, rejected) == ([], [])
    # Only the acceptances: every message reaches the agent raw, through the read side.
    assert {e.type for e in events} == {"om-message-accepted"}
    assert [e.data.message.id for e in events] == [f"t1-m{i}" for i in range(20)]
    assert [p.id for p in state.pending] == [f"t1-m{i}" for i in range(20)]
    assert state.observations == "" and state.cursor is None


def test_the_same_input_enabled_does_observe():
    _, events, jobs, _ = run(engine(300), conversation(20))
    assert jobs and any(e.type == "data-om-observation-start" for e in events)


def test_manual_cycles_on_a_disabled_memory_are_refused_with_a_reason():
    config = engine(300, enabled=False)
    _, events, jobs, rejected = run(config, [
        message(0), ObserveRequested(thread_id="t1", at=T0),
        ReflectRequested(thread_id="t1", at=T0, prompt="condense")])
    assert ([e.type for e in events], jobs) == (["om-message-accepted"], [])
    assert [r.reason.split(" for ")[0] for r in rejected] == ["observe-requested", "reflect-requested"]
    assert all("thread:t1" in r.reason and "enabled is false" in r.reason for r in rejected)

