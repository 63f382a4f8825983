"""Commands on `<ns>.log`: overrides, thread patches, deletion, idempotent request ids."""

from omstream.engine.fold import fold, new_state
from omstream.schemas.control import ConfigOverridden, ThreadDeleted, ThreadPatched
from tests.helpers import T0, engine, message


def run(config, inputs):
    state, events = new_state("thread:t1", "t1", "u1"), []
    for item in inputs:
        out = fold(state, item, config)
        state, events = out.state, events + list(out.events)
    return state, events


def override(tokens: int, request: str | None = None) -> ConfigOverridden:
    return ConfigOverridden(thread_id="t1", at=T0, request_id=request,
                            overrides={"observation": {"messageTokens": tokens}})


def test_a_message_tokens_override_moves_the_threshold():
    config = engine(5000)
    state, events = run(config, [override(300), message(0, words=150), message(1, words=150)])
    assert state.message_tokens_override == 300
    assert events[0].data.windows.active.messages.threshold == 300
    assert "data-om-observation-start" in [e.type for e in events]


def test_an_override_at_or_below_buffer_tokens_is_ignored():
    config = engine(5000, observation={"bufferTokens": 1000})
    state, events = run(config, [override(800)])
    assert events[-1].data.windows.active.messages.threshold == 5000


def test_commands_with_the_same_request_id_apply_once():
    config = engine(5000)
    _, events = run(config, [override(300, "r1"), override(400, "r1")])
    assert len(events) == 1  # the second is recognised and dropped


def test_thread_patches_emit_thread_updates_and_pin():
    config = engine(5000)
    state, events = run(config, [
        ThreadPatched(thread_id="t1", at=T0, title="Trip to Avignon"),
        ThreadPatched(thread_id="t1", at=T0, title="Trip to Avignon"),  # unchanged: nothing
        ThreadPatched(thread_id="t1", at=T0, title_pinned=True),
    ])
    updates = [e for e in events if e.type == "data-om-thread-update"]
    assert [(u.data.old_title, u.data.new_title) for u in updates] == [(None, "Trip to Avignon")]
    assert state.title_pinned and state.title == "Trip to Avignon"


def test_deleting_a_thread_forgets_its_memory_but_keeps_the_sequence():
    config = engine(300)
    before, _ = run(config, [message(i, words=20) for i in range(2)])
    out = fold(before, ThreadDeleted(thread_id="t1", at=T0), config)
    assert [e.type for e in out.events] == ["om-memory-deleted"]
    state = out.state
    assert state.pending == () and state.seen == {} and state.observations == ""
    assert state.seq == before.seq + 1  # event ids stay unique after the deletion


def test_a_deletion_mid_cycle_cancels_it_and_the_late_result_writes_nothing():
    from tests.helpers import scripted_result

    config = engine(300)
    state, jobs = new_state("thread:t1", "t1", "u1"), []
    for i in range(4):
        out = fold(state, message(i, words=60), config)
        state, jobs = out.state, jobs + list(out.jobs)
    assert state.in_flight is not None
    deleted = fold(state, ThreadDeleted(thread_id="t1", at=T0), config).state
    late = fold(deleted, scripted_result(jobs[0]), config)
    assert [e.type for e in late.events] == ["om-result-ignored"]
    assert late.state.observations == "" and late.state.pending == ()
