"""The lifecycle's invariants (spec §17, normative choice 6) over random agent loops.

Messages and steps arrive in random order with model results delivered late, out of order,
twice, failed or degenerate; buffering, activation, blockAfter and both kinds of reflection all
happen.  Whatever the interleaving: every message reaches the context exactly once (raw or
observed), the cursor never moves backwards, no buffered chunk is lost across a reflection, no
token is counted twice, and folding the same inputs again gives a byte-identical log.
"""

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.engine.fold import fold, new_state
from omstream.engine.rules.tokens import count_message, count_messages
from omstream.schemas.control import StepStarted
from tests.helpers import engine, message, scripted_result

# Small windows so that a short random conversation crosses every threshold.
CONFIG = engine(300, observation={"bufferTokens": 0.2}, reflection={"observationTokens": 200})
LOOP = "<observations>\n" + "* 🔴 (09:00) the same line again and again and again\n" * 120 + "</observations>"

actions = st.lists(st.one_of(
    st.tuples(st.just("message"), st.integers(5, 140)),
    st.tuples(st.just("step"), st.integers(0, 2)),
    st.tuples(st.just("deliver"), st.integers(0, 5),
              st.sampled_from(["ok", "ok", "ok", "fail", "dup", "degenerate"])),
), min_size=1, max_size=60)


def run(script):
    state = new_state("thread:t1", "t1", "u1")
    log, queue, trace, messages = [], [], [], []

    def apply(item):
        nonlocal state
        before = state
        out = fold(state, item, CONFIG)
        state = out.state
        log.extend(e.model_dump_json() for e in out.events)
        queue.extend(out.jobs)
        trace.append((before, out, item))

    for action in script:
        if action[0] == "message":
            msg = message(len(messages), words=action[1])
            messages.append(msg)
            apply(msg)
        elif action[0] == "step" and messages:
            apply(StepStarted(thread_id="t1", step_number=action[1], after_message_id=messages[-1].id,
                              at=messages[-1].created_at + timedelta(seconds=1)))
        elif action[0] == "deliver" and queue:
            job = queue.pop(action[1] % len(queue))  # any queued job: results arrive out of order
            fate = action[2]
            result = (scripted_result(job, ok=False, error="RateLimitError: 429") if fate == "fail"
                      else scripted_result(job, output=LOOP) if fate == "degenerate"
                      else scripted_result(job))
            apply(result)
            if fate == "dup":
                apply(result)
    while queue:  # settle
        apply(scripted_result(queue.pop(0)))
    return state, log, trace, messages


def observed_ids(trace):
    ids = []
    for _, out, _ in trace:
        for e in out.events:
            if e.type == "data-om-observation-end" and e.data.operation_type == "observation":
                ids += e.data.observed_message_ids
            elif e.type == "data-om-activation" and e.data.operation_type == "observation":
                ids += e.data.activated_message_ids
    return ids


@settings(max_examples=120, deadline=None)
@given(actions)
def test_every_message_reaches_the_context_exactly_once(script):
    state, _, trace, messages = run(script)
    observed = observed_ids(trace)
    raw = [m.id for m in state.pending]
    assert len(set(observed)) == len(observed)
    assert sorted(observed + raw) == sorted(m.id for m in messages)
    assert state.held == () and state.in_flight is None and state.parked == ()


@settings(max_examples=80, deadline=None)
@given(actions)
def test_cursor_monotonic_chunks_survive_reflection_and_tokens_counted_once(script):
    state, _, trace, messages = run(script)
    cursors = [out.state.cursor for _, out, _ in trace if out.state.cursor is not None]
    assert cursors == sorted(cursors)
    for before, out, item in trace:
        if out.state.generation > before.generation:
            activated = {e.data.cycle_id for e in out.events if e.type == "data-om-activation"}
            kept = {c.cycle_id for c in before.chunks} - activated
            assert kept <= {c.cycle_id for c in out.state.chunks}
        # A step reports the windows it settled on: every pending message counted exactly once.
        last = out.events[-1] if out.events else None
        settled = isinstance(item, StepStarted) and out.state.in_flight is None
        if settled and last is not None and last.type == "data-om-status":
            pending = [m.tokens for m in out.state.pending]
            assert last.data.windows.active.messages.tokens == count_messages(pending)
    by_id = {m.id: m for m in messages}
    assert all(p.tokens == count_message(by_id[p.id], CONFIG.counter) for p in state.pending)


@settings(max_examples=40, deadline=None)
@given(actions)
def test_folding_the_same_inputs_twice_gives_identical_logs(script):
    first, second = run(script), run(script)
    assert first[1] == second[1] and first[0] == second[0]


@settings(max_examples=80, deadline=None)
@given(actions)
def test_the_held_events_tell_every_hold_and_its_release(script):
    """A reader that follows the events alone knows how many inputs the memory holds, and the
    cycle they wait for, after every fold: `om-input-held` counts them, `om-input-released`
    empties the count, and the events name the cycle the state says."""
    _, _, trace, _ = run(script)
    told = 0
    for _, out, _ in trace:
        for e in out.events:
            if e.type == "om-input-held":
                assert e.data.held >= 1
                told = e.data.held
            elif e.type == "om-input-released":
                assert e.data.released == told
                told = 0
        assert told == len(out.state.held)
        if out.state.held:
            awaited = out.state.in_flight or out.state.buffering or out.state.reflection_buffering
            assert out.state.held_for == awaited.cycle_id
        else:
            assert out.state.held_for is None


# Blocking cycles only: whatever arrives during one is held, so when a model answers can change
# what the memory tells (its holds), never what it decides.
BLOCKING = engine(300, reflection={"observationTokens": 200})
timings = st.lists(st.one_of(
    st.tuples(st.just("message"), st.integers(5, 140)),
    st.tuples(st.just("step"), st.integers(0, 2)),
    st.tuples(st.just("deliver"), st.integers(0, 5)),
), min_size=1, max_size=60)


def decided_run(script, *, at_once: bool) -> list[dict]:
    """The events of `script` but the notices and their seqs; every job answered as soon as it is
    sent (`at_once`) or when the script says."""
    state = new_state("thread:t1", "t1", "u1")
    events, queue, count = [], [], 0

    def apply(item):
        nonlocal state
        out = fold(state, item, BLOCKING)
        state = out.state
        events.extend(out.events)
        queue.extend(out.jobs)
        while at_once and queue:
            apply(scripted_result(queue.pop(0)))

    for action in script:
        if action[0] == "message":
            apply(message(count, words=action[1]))
            count += 1
        elif action[0] == "step" and count:
            apply(StepStarted(thread_id="t1", step_number=action[1], after_message_id=f"t1-m{count - 1}",
                              at=message(count - 1).created_at + timedelta(seconds=1)))
        elif action[0] == "deliver" and queue and not at_once:
            apply(scripted_result(queue.pop(action[1] % len(queue))))
    while queue:
        apply(scripted_result(queue.pop(0)))
    return [{k: v for k, v in e.model_dump(mode="json").items() if k != "seq"}
            for e in events if e.type not in ("om-input-held", "om-input-released")]


@settings(max_examples=80, deadline=None)
@given(timings)
def test_when_the_models_answer_changes_the_notices_only(script):
    """Ids and decisions are the same whether every answer came at once or late behind held
    inputs: the notices take seqs, not the ids the memory's events and cycles count."""
    late, at_once = decided_run(script, at_once=False), decided_run(script, at_once=True)
    assert late == at_once
