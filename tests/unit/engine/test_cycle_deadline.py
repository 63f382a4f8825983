"""The fold's backstop (cycleDeadline): a blocking cycle whose answer never comes fails at the
first input of its memory more than cycleDeadline of log time (the records' timestamps in the
input log) after its start; the held inputs are applied and a late answer is recorded as ignored.
The log's time only: a refold decides the same, and history imported faster than real time
(createdAt hours apart, written in a second) never trips it."""

from datetime import timedelta

import pytest

from omstream.engine.fold import fold, new_state
from omstream.schemas.config import OmConfigError, load_om_config
from omstream.schemas.control import ObserveRequested
from tests.helpers import T0, engine, message, scripted_result


def at(i: int, after):
    return message(i).model_copy(update={"created_at": after})


LOG0 = T0 + timedelta(days=1)  # when the records were written, whatever their createdAt


def start_blocking(config):
    state, jobs = new_state("thread:t1", "t1", "u1"), []
    for i in range(6):
        out = fold(state, message(i), config, log_time=LOG0)
        state, jobs = out.state, jobs + list(out.jobs)
    assert state.in_flight is not None and state.blocked_since == LOG0
    return state, jobs[-1]


def kinds(out):
    return [e.type for e in out.events]


def test_an_unanswered_cycle_fails_after_its_deadline_and_the_held_inputs_are_applied():
    config = engine(500, cycleDeadline="10m")
    state, job = start_blocking(config)
    start = state.in_flight.started_at
    # Written 5 minutes later, however far apart their createdAt: held.
    held = fold(state, at(6, start + timedelta(hours=5)), config, log_time=LOG0 + timedelta(minutes=5))
    assert held.state.in_flight is not None and len(held.state.held) == 1
    assert "data-om-observation-failed" not in kinds(held)
    late = fold(held.state, at(7, start + timedelta(hours=6)), config,
                log_time=LOG0 + timedelta(minutes=10, seconds=1))
    failed = [e for e in late.events if e.type == "data-om-observation-failed"]
    assert len(failed) == 1 and failed[0].data.cycle_id == job.cycle_id
    assert failed[0].data.error.startswith("deadline")
    assert failed[0].data.failed_at == start + timedelta(minutes=10)
    # m6 is applied; with everything still unobserved it starts the next cycle, which holds m7.
    assert kinds(late)[:2] == ["data-om-observation-failed", "data-om-status"]
    assert "data-om-observation-start" in kinds(late)
    assert late.state.in_flight.cycle_id != job.cycle_id and "t1-m6" in late.state.in_flight.message_ids
    assert [h["id"] for h in late.state.held] == ["t1-m7"]
    # The model's answer, when it finally comes, finds no cycle waiting for it.
    answer = fold(late.state, scripted_result(job), config, log_time=LOG0 + timedelta(minutes=11))
    assert "om-result-ignored" in kinds(answer) and "data-om-observation-end" not in kinds(answer)


def test_commands_count_as_later_inputs_and_inputs_within_the_deadline_wait():
    config = engine(500, cycleDeadline=60_000)
    state, job = start_blocking(config)
    start = state.in_flight.started_at
    observe = ObserveRequested(thread_id="t1", at=start)
    soon = fold(state, observe, config, log_time=LOG0 + timedelta(seconds=60))
    assert soon.state.in_flight is not None  # exactly the deadline: still waiting
    later = fold(soon.state, observe, config, log_time=LOG0 + timedelta(seconds=61))
    assert "data-om-observation-failed" in kinds(later)


def test_without_a_log_time_there_is_no_deadline():
    config = engine(500, cycleDeadline=60_000)
    state, _ = start_blocking(config)
    out = fold(state, at(6, state.in_flight.started_at + timedelta(days=3)), config)
    assert out.state.in_flight is not None and len(out.state.held) == 1


def test_the_default_deadline_is_ten_minutes_and_bad_values_are_refused():
    assert load_om_config({}).cycle_deadline_ms == 600_000
    assert load_om_config({"cycleDeadline": "90s"}).cycle_deadline_ms == 90_000
    for bad in ("soon", 0, -5, True):
        with pytest.raises(OmConfigError, match="cycleDeadline"):
            load_om_config({"cycleDeadline": bad})
