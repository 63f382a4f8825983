"""Properties of the fold over random interleavings of messages and (late, duplicated, failed) results."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.engine.fold import fold, new_state
from omstream.engine.rules.tokens import count_message
from tests.helpers import engine, message, scripted_result

CONFIG = engine(400)


@st.composite
def scenarios(draw):
    n = draw(st.integers(min_value=1, max_value=30))
    words = draw(st.lists(st.integers(min_value=1, max_value=120), min_size=n, max_size=n))
    # After each message: how many pending results to deliver now, and how to deliver them.
    deliveries = draw(st.lists(st.integers(min_value=0, max_value=2), min_size=n, max_size=n))
    fates = draw(st.lists(st.sampled_from(["ok", "ok", "fail", "dup"]), min_size=n, max_size=n))
    return [message(i, words=w) for i, w in enumerate(words)], deliveries, fates


def simulate(messages, deliveries, fates):
    state = new_state("thread:t1", "t1", "u1")
    log, queue, cursors = [], [], []

    def apply(item):
        nonlocal state
        out = fold(state, item, CONFIG)
        state = out.state
        log.extend(e.model_dump_json() for e in out.events)
        queue.extend(out.jobs)
        if state.cursor is not None:
            cursors.append(state.cursor)
        return out

    for i, msg in enumerate(messages):
        apply(msg)
        for _ in range(deliveries[i]):
            if queue:
                job = queue.pop(0)
                fate = fates[i]
                result = scripted_result(job, ok=fate != "fail", error="APIError: 500" if fate == "fail" else None)
                apply(result)
                if fate == "dup":
                    apply(result)
    while queue:  # settle
        apply(scripted_result(queue.pop(0)))
    return state, log, cursors


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_every_message_reaches_the_context_exactly_once(case):
    messages, deliveries, fates = case
    state, log, _ = simulate(messages, deliveries, fates)
    observed = []
    for line in log:
        if '"data-om-observation-end"' in line:
            observed += json.loads(line)["data"]["observed_message_ids"]
    raw = [m.id for m in state.pending]
    assert sorted(observed + raw) == sorted(m.id for m in messages)
    assert len(set(observed)) == len(observed)
    assert state.held == () and state.in_flight is None


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_cursor_never_moves_backwards_and_replay_is_identical(case):
    messages, deliveries, fates = case
    state, log, cursors = simulate(messages, deliveries, fates)
    assert cursors == sorted(cursors)
    again_state, again_log, _ = simulate(messages, deliveries, fates)
    assert again_log == log and again_state == state


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_pending_tokens_are_counted_once(case):
    messages, deliveries, fates = case
    state, _, _ = simulate(messages, deliveries, fates)
    expected = {m.id: m for m in messages}
    for pending in state.pending:
        assert pending.tokens == count_message(expected[pending.id], CONFIG.counter)
