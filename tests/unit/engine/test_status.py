"""`data-om-status` reports what `thresholds.status_windows` computes: the tested function is the
one that runs (spec §6.1)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.engine.cycles import status
from omstream.engine.fold import fold, new_state
from omstream.engine.rules.thresholds import StatusWindows, projected_message_removal, status_windows
from omstream.engine.rules.tokens import count_messages
from omstream.engine.state import BufferedChunk, Cycle, PendingMessage
from omstream.engine.step import EngineConfig, Step
from omstream.schemas.config import load_om_config
from tests.helpers import T0, engine, message


def _status(events):
    (found,) = [e for e in events if e.type == "data-om-status"]
    return found.data.windows


def test_the_status_marker_reports_the_windows_status_windows_returns(monkeypatch):
    """Were the marker computed anywhere else, these shifted numbers would not reach it."""
    calls: list[dict] = []

    def shifted(**inputs) -> StatusWindows:
        calls.append(inputs)
        real = status_windows(**inputs)
        return replace(real, threshold=real.threshold + 1, reflection_threshold=real.reflection_threshold + 2,
                       buffered_message_tokens=real.buffered_message_tokens + 3,
                       projected_message_removal=real.projected_message_removal + 4)

    monkeypatch.setattr(status, "status_windows", shifted)
    config = engine(3000, observation={"bufferTokens": 0.2})
    out = fold(new_state("thread:t1", "t1", "u1"), message(0), config)
    windows = _status(out.events)
    assert len(calls) == 1 and calls[0]["pending_tokens"] == windows.active.messages.tokens
    assert windows.active.messages.threshold == 3001
    assert windows.active.observations.threshold == 40_002
    assert windows.buffered.observations.message_tokens == 3
    assert windows.buffered.observations.projected_message_removal == 4


# --- on random memories: the marker's numbers are the ones the check decides with ---------------
@st.composite
def configs(draw) -> EngineConfig:
    message_tokens = draw(st.integers(5_000, 40_000))  # above every absolute buffer size drawn
    observation: dict = {"model": "scripted/observer", "messageTokens": message_tokens}
    if draw(st.booleans()):
        observation["bufferTokens"] = False
    else:
        observation["bufferTokens"] = draw(st.sampled_from([0.1, 0.2, 0.25, 2_000]))
        observation["bufferActivation"] = draw(st.sampled_from([0.5, 0.8, 1, 1_000, 2_000]))
        observation["blockAfter"] = draw(st.sampled_from([1.2, 1.5, 100_000]))
    om = load_om_config({
        "observation": observation,
        "reflection": {"model": "scripted/reflector", "observationTokens": draw(st.integers(1_000, 60_000))},
        "shareTokenBudget": draw(st.booleans()) and observation["bufferTokens"] is False,
    })
    return EngineConfig(om)


@st.composite
def memories(draw, config: EngineConfig):
    pending_tokens = draw(st.lists(st.integers(1, 4_000), max_size=12))
    pending = tuple(PendingMessage(id=f"m{i}", role="user", created_at=T0 + timedelta(minutes=i), text="x",
                                   tokens=t) for i, t in enumerate(pending_tokens))
    chunk_tokens = draw(st.lists(st.integers(1, 6_000), max_size=5)) if config.resolved.async_buffering else []
    chunks = tuple(BufferedChunk(cycle_id=f"c{i}", observations="* x", tokens=draw(st.integers(1, 500)),
                                 message_ids=(f"m{i}",), message_tokens=t, last_observed_at=T0)
                   for i, t in enumerate(chunk_tokens))
    buffering = None
    if config.resolved.async_buffering and draw(st.booleans()):
        buffering = Cycle(cycle_id="b", kind="buffer", message_ids=(), tokens=1, started_at=T0, generation=0)
    return new_state("thread:t1", "t1", "u1").model_copy(update={
        "pending": pending, "chunks": chunks, "buffering": buffering,
        "observation_tokens": draw(st.integers(0, 80_000)),
        "message_tokens_override": draw(st.none() | st.integers(500, 50_000)),
        "observation_tokens_override": draw(st.none() | st.integers(500, 50_000)),
        "buffer_boundary": draw(st.integers(0, 30_000)),
    })


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_status_marker_agrees_with_the_engines_thresholds(data):
    config = data.draw(configs())
    state = data.draw(memories(config))
    step = Step(state, config)
    status.emit_status(step, T0, None)
    windows = _status(step.events)
    pending = count_messages([m.tokens for m in state.pending])
    threshold = config.message_threshold(state)
    chunk_tokens = [c.message_tokens for c in state.chunks]
    activation = config.resolved.observation.buffer_activation
    assert windows.active.messages.tokens == pending
    assert windows.active.messages.threshold == threshold
    assert windows.active.observations.threshold == config.reflection_threshold(state, pending)
    assert windows.buffered.observations.message_tokens == min(sum(chunk_tokens), pending)
    assert windows.buffered.observations.projected_message_removal == (
        projected_message_removal(chunk_tokens, activation, threshold, pending) if activation else 0)
    assert windows.buffered.observations.status == (
        "running" if state.buffering else "complete" if state.chunks else "idle")
    assert status.windows_of(state, config, pending).should_block == (
        pending >= (config.resolved.observation.block_after or threshold))
