"""Held inputs on the read side: the context, the stored view and the dashboard's figures tell
that the memory holds inputs behind a cycle, from `om-input-held` to `om-input-released`."""

from omstream.engine.fold import fold, new_state
from omstream.projections.store.view_rows import decode_view, encode_head
from omstream.projections.views.activity import ActivityIndex
from omstream.projections.views.context import ContextProjection
from omstream.projections.views.history import EventHistory
from omstream.schemas.base import iso
from tests.helpers import engine, message, scripted_result


def holding():
    """A blocking observation in flight and two messages held behind it; then its answer."""
    config = engine(500)
    state, events, job = new_state("thread:t1", "t1", "u1"), [], None
    for i in range(20):
        out = fold(state, message(i), config)
        state, events = out.state, events + list(out.events)
        if out.jobs:
            job = out.jobs[0]
            break
    assert job is not None
    held, first = [], i + 1
    for n in range(first, first + 2):
        out = fold(state, message(n), config)
        state, held = out.state, held + list(out.events)
    answered = fold(state, scripted_result(job), config)
    return events, held, list(answered.events), job


def test_the_context_says_what_is_held_and_behind_which_cycle_until_it_is_released():
    events, held, answered, job = holding()
    projection = ContextProjection()
    for event in events + held:
        projection.apply_event(event)
    snapshot = projection.threads["t1"].snapshot()
    assert snapshot["blocked"] is True
    assert snapshot["held"] == {"count": 2, "cycleId": job.cycle_id, "since": snapshot["held"]["since"]}
    assert snapshot["held"]["since"] == iso(held[0].event_time)  # since the first hold
    view = projection.threads["t1"]
    stored = decode_view("t1", encode_head(view), view.observations, [], "UTC")
    assert stored.held == view.held  # a restarted `om serve` still knows
    for event in answered:
        projection.apply_event(event)
    after = projection.threads["t1"].snapshot()
    assert after["held"] is None and after["blocked"] is False
    assert {m["id"] for m in after["messages"]} >= {e.data.message_id for e in held}


def test_the_dashboard_figures_show_a_holding_badge_from_the_first_hold():
    events, held, answered, job = holding()
    history = EventHistory()
    for i, event in enumerate(events + held):
        history.append(event, 1_000 * i)
    index = ActivityIndex(history)
    answer = index.of("thread:t1").answer()
    assert answer["held"] == {"count": 2, "cycleId": job.cycle_id, "sinceMs": 1_000 * len(events)}
    assert answer["labels"] == ["observing", "holding 2 inputs"]
    for i, event in enumerate(answered):
        history.append(event, 1_000 * (len(events) + len(held) + i))
    answer = index.of("thread:t1").answer()
    assert answer["held"] is None and "holding" not in " ".join(answer["labels"])
