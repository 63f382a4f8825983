"""The fold on its own: no broker, no model, no clock."""

from datetime import timedelta

from omstream.engine.fold import fold, new_state
from omstream.schemas.control import StepStarted
from tests.helpers import T0, engine, fold_inputs, message, scripted_result

KEY = "thread:t1"


def run(inputs, config):
    return fold_inputs(inputs, config, KEY)


def types(events):
    """The cycle events: without the per-step status and the per-message acceptance."""
    return [e.type for e in events if e.type not in ("data-om-status", "om-message-accepted")]


def test_below_threshold_nothing_is_observed():
    state, events, jobs, _ = run([message(0, words=20)], engine(500))
    assert jobs == [] and types(events) == []
    assert [e.type for e in events] == ["om-message-accepted", "data-om-status"]
    assert events[0].data.message.tokens.count == state.pending[0].tokens
    assert state.pending_ids == ("t1-m0",)


def test_threshold_starts_a_blocking_observation_and_the_result_commits_it():
    config = engine(500)
    state, events, jobs, _ = run([message(i) for i in range(6)], config)
    assert len(jobs) == 1 and types(events) == ["data-om-observation-start"]
    job = jobs[0]
    assert "## New Message History to Observe" in job.messages[1].content
    covered = state.in_flight.message_ids
    out = fold(state, scripted_result(job), config)
    end = [e for e in out.events if e.type == "data-om-observation-end"][0]
    assert end.data.observed_message_ids == covered
    assert end.data.tokens_observed == state.in_flight.tokens
    assert out.state.in_flight is None and out.state.pending == ()
    assert out.state.cursor == message(5).created_at
    assert out.state.observations.startswith("Date: Mar 3, 2025\n* 🔴 (09:00) User said: [0]")
    assert end.data.observation_tokens == config.counter.count(out.state.observations)


def test_messages_arriving_during_a_cycle_are_held_then_folded_in_order():
    config = engine(500)
    state, _, jobs, _ = run([message(i) for i in range(6)], config)
    clock = state.clock
    for i in range(6, 9):
        held = fold(state, message(i, words=60) if i < 8 else message(i).model_copy(
            update={"created_at": message(i).created_at + timedelta(hours=3)}), config)
        # Accepted when folded, not when held; the hold itself is told, with what it waits for.
        [event] = held.events
        assert event.type == "om-input-held" and event.data.cycle_id == jobs[0].cycle_id
        assert (event.data.held, event.data.input_type, event.data.message_id) == (i - 5, "message", f"t1-m{i}")
        assert event.event_time == clock and held.state.clock == clock  # a held input moves no clock
        state = held.state
    assert [h["id"] for h in state.held] == ["t1-m6", "t1-m7", "t1-m8"]
    out = fold(state, scripted_result(jobs[0]), config)
    assert out.state.held == () and out.state.held_for is None
    assert out.state.pending_ids == ("t1-m6", "t1-m7", "t1-m8")
    accepted = [e for e in out.events if e.type == "om-message-accepted"]
    assert [e.data.message.id for e in accepted] == ["t1-m6", "t1-m7", "t1-m8"]
    end = next(e for e in out.events if e.type == "data-om-observation-end")
    [released] = [e for e in out.events if e.type == "om-input-released"]
    assert (released.data.cycle_id, released.data.released) == (jobs[0].cycle_id, 3)
    assert end.seq < released.seq < accepted[0].seq  # after the cycle that held them, in order


def test_second_boundary_is_appended_after_a_message_boundary_line():
    config = engine(300)
    state, jobs = new_state(KEY, "t1", "u1"), []
    for i in range(12):
        out = fold(state, message(i), config)
        state = out.state
        for job in out.jobs:
            state = fold(state, scripted_result(job), config).state
            jobs.append(job)
    assert len(jobs) >= 2
    assert state.observations.count("--- message boundary (2025-03-03T09:0") == len(jobs) - 1
    assert "## Previous Observations" in jobs[1].messages[1].content


def test_duplicate_message_is_ignored_and_a_conflicting_one_rejected():
    config = engine(5000)
    original = message(0)
    changed = original.model_copy(update={"content": "something else"})
    state, events, _, rejected = run([original, original, changed], config)
    assert state.pending_ids == ("t1-m0",)
    assert [e.type for e in events] == ["om-message-accepted", "data-om-status"]  # the first copy only
    assert len(rejected) == 1 and "already used for a different message" in rejected[0].reason


def test_failed_result_reports_and_leaves_messages_for_the_next_cycle():
    config = engine(500)
    state, _, jobs, _ = run([message(i) for i in range(6)], config)
    out = fold(state, scripted_result(jobs[0], ok=False, error="RateLimitError: 429"), config)
    failed = [e for e in out.events if e.type == "data-om-observation-failed"]
    assert failed and failed[0].data.error == "RateLimitError: 429"
    assert out.state.in_flight is None
    assert len(out.state.pending) == 6
    again = fold(out.state, message(6), config)
    assert len(again.jobs) == 1
    assert again.state.in_flight.message_ids == (*out.state.pending_ids, "t1-m6")


def test_degenerate_output_is_regenerated_once_then_fails_and_keeps_the_messages():
    config = engine(500)
    state, _, jobs, _ = run([message(i) for i in range(6)], config)
    loop = "<observations>\n" + "* 🔴 (09:00) the same line repeated again and again\n" * 200 + "</observations>"
    again = fold(state, scripted_result(jobs[0], output=loop), config)
    assert again.events == () and len(again.jobs) == 1  # asked once more, nothing reported yet
    assert again.jobs[0].cycle_id == jobs[0].cycle_id and again.state.in_flight is not None
    out = fold(again.state, scripted_result(again.jobs[0], output=loop), config)
    assert types(out.events) == ["data-om-observation-failed"]
    assert "degenerate" in out.events[0].data.error
    assert out.state.pending_ids == state.pending_ids and out.state.in_flight is None
    retry = fold(state, scripted_result(jobs[0], output=loop), config)
    healed = fold(retry.state, scripted_result(retry.jobs[0]), config)
    assert types(healed.events) == ["data-om-observation-end"]


def test_a_job_answered_twice_changes_nothing_the_second_time():
    config = engine(500)
    state, _, jobs, _ = run([message(i) for i in range(6)], config)
    result = scripted_result(jobs[0])
    applied = fold(state, result, config).state
    assert applied.answered == (jobs[0].cycle_id,)
    # A re-run of the job after a crash may answer differently: still a redelivery.
    for answer in (result, scripted_result(jobs[0], ok=False, error="429")):
        again = fold(applied, answer, config)
        assert not again.events
        assert again.state == applied


def test_a_result_no_cycle_waits_for_is_recorded_and_ignored():
    config = engine(500)
    state, _, jobs, _ = run([message(i) for i in range(6)], config)
    stray = scripted_result(jobs[0]).model_copy(update={"cycle_id": "thread:t1#99"})
    out = fold(state, stray, config)
    assert [e.type for e in out.events] == ["om-result-ignored"]
    assert out.state.in_flight == state.in_flight


def test_steps_apply_in_log_order_even_when_their_message_never_came():
    config = engine(500)
    first = StepStarted(thread_id="t1", step_number=0, at=T0, after_message_id="t1-m0")
    # The message this step names was refused (it never reached the fold): in one ordered log
    # it will not come later, so the step is applied at once instead of waiting forever.
    orphan = StepStarted(thread_id="t1", step_number=0, at=T0 + timedelta(minutes=5),
                         after_message_id="t1-refused")
    inputs = [message(0), first] + [message(i) for i in range(1, 6)] + [orphan]
    state, events, jobs, _ = run(inputs, config)
    assert state.steps_reported and state.parked == ()
    statuses = [e for e in events if e.type == "data-om-status"]
    # Message 0 (checked per message until a step arrives), then the first step; the orphan
    # step started the observation and reports when it has ended.
    assert [s.data.step_number for s in statuses] == [None, 0]
    assert len(jobs) == 1
    assert state.in_flight.message_ids == tuple(f"t1-m{i}" for i in range(6))
    done = fold(state, scripted_result(jobs[0]), config)
    assert [e.type for e in done.events] == ["data-om-observation-end", "data-om-status"]
    assert done.events[-1].data.step_number == 0
    assert done.events[-1].data.windows.active.messages.tokens == 0


def test_folding_the_same_input_twice_gives_identical_logs():
    config = engine(300)

    def log():
        state, out_log = new_state(KEY, "t1", "u1"), []
        for i in range(15):
            out = fold(state, message(i), config)
            state = out.state
            out_log += [e.model_dump_json() for e in out.events]
            for job in out.jobs:
                res = fold(state, scripted_result(job), config)
                state = res.state
                out_log += [e.model_dump_json() for e in res.events]
        return out_log, state

    assert log() == log()


def test_event_ids_derive_from_key_and_sequence():
    _, events, _, _ = run([message(i) for i in range(3)], engine(5000))
    assert [e.seq for e in events] == [1, 2, 3, 4, 5, 6]  # acceptance and status per message
    assert len({e.event_id for e in events}) == 6


def test_model_by_input_tokens_picks_the_tier_and_fails_above_the_largest():
    config = engine(500, observation={"model": {"upTo": {"600": "scripted/observer",
                                                          "900": "scripted/observer-large"}}})
    state, _, jobs, _ = run([message(i) for i in range(6)], config)
    assert jobs[0].model == "scripted/observer" and jobs[0].input_tokens <= 600
    small = engine(500, observation={"model": {"upTo": {"100": "scripted/observer"}}})
    state, events, jobs, _ = run([message(i) for i in range(6)], small)
    assert jobs == [] and types(events) == ["data-om-observation-start", "data-om-observation-failed"]
    assert "exceeds the largest configured threshold (100)" in events[-2].data.error
    assert state.in_flight is None and len(state.pending) == 6


def test_lines_repeating_the_log_are_dropped_unless_nothing_else_is_left():
    """A small model writes earlier observations out again with new times: those lines are
    dropped from the cycle's observations; an answer of nothing but repeats is kept as it is
    (failing it would retry the cycle at every step, and the model mostly repeats itself)."""
    config = engine(500)

    def observe(state, first: int, answer: str):
        jobs = []
        for i in range(first, first + 6):
            out = fold(state, message(i), config)
            state, jobs = out.state, jobs + list(out.jobs)
        return fold(state, scripted_result(jobs[0], output=f"<observations>\nDate: Mar 3, 2025\n{answer}\n</observations>"), config)

    said = "* 🔴 (09:00) User stated the launch moved to Friday"
    again = "* 🔴 (09:05) User stated the launch moved to Friday"
    out = observe(new_state(KEY, "t1", "u1"), 0, said)
    out = observe(out.state, 6, f"{again}\n* 🟡 (09:05) User asked for the venue list")
    end = next(e for e in out.events if e.type == "data-om-observation-end")
    assert "venue list" in end.data.observations and "launch" not in end.data.observations
    out = observe(out.state, 12, again)
    end = next(e for e in out.events if e.type == "data-om-observation-end")
    # Kept as it is, but for its time: 09:05 is before these messages (09:06 to 09:08), so
    # the observation-time rule moves it to the first of them.
    assert "(09:06) User stated the launch moved to Friday" in end.data.observations
    assert end.data.times_corrected == 1
