"""Deleting one thread of a resource memory (issue 28): its messages and its sections leave the
memory, the other threads keep theirs, and nothing of the deleted thread reaches a later prompt."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.engine.cycles.thread_deletion import without_thread_sections
from omstream.engine.prompting.groups import parse_groups
from omstream.engine.prompting.sections import section_bodies, shown_thread_id
from omstream.schemas.control import ObserveRequested, ThreadDeleted, ThreadPatched
from tests.helpers import T0
from tests.unit.engine.resource_helpers import Memory, observed_ids, resource_engine, say, tag

A, B, C = "conv-1", "conv-2", "conv-3"
_TAG = re.compile(r"R\dT(\d)N\d{4}")


def _tags_of(thread: str, text: str) -> set[str]:
    return {m.group(0) for m in _TAG.finditer(text) if m.group(1) == thread[-1]}


def test_sections_of_the_thread_leave_and_empty_chunks_take_their_boundary():
    log = ('<thread id="a">\nDate: Mar 3, 2025\n* x\n</thread>\n\n--- message boundary (t1) ---\n\n'
           '<thread id="b">\nDate: Mar 3, 2025\n* y\n</thread>\n\n--- message boundary (t2) ---\n\n'
           '<thread id="a">\nDate: Mar 4, 2025\n* z\n</thread>\n\nmerged line\n\n<thread id="a">\n* w\n</thread>')
    assert without_thread_sections(log, "a") == (
        '<thread id="b">\nDate: Mar 3, 2025\n* y\n</thread>\n\n--- message boundary (t2) ---\n\nmerged line')
    assert without_thread_sections(log, "b") == log.replace(
        '\n\n--- message boundary (t1) ---\n\n<thread id="b">\nDate: Mar 3, 2025\n* y\n</thread>', "")
    assert without_thread_sections(log, "c") == log
    assert without_thread_sections("", "a") == ""


def test_deleting_a_thread_removes_its_messages_section_and_metadata_and_keeps_the_others():
    memory = Memory(resource_engine(400, obscureThreadIds=False))
    memory.feed(ThreadPatched(thread_id=A, at=T0, title="A's title"))
    n = 0
    while not memory.of_type("data-om-observation-end"):
        memory.feed(say(n, (A, B, C)[n % 3]))
        memory.answer_all()
        n += 1
    for k in range(n, n + 6):  # unobserved messages of every thread
        memory.feed(say(k, (A, B, C)[k % 3]))
    before = memory.state
    memory.feed(ThreadDeleted(thread_id=A, at=T0, request_id="del-1"))
    state = memory.state
    assert {m.thread_id for m in state.pending} == {B, C}
    assert [m for m in state.pending] == [m for m in before.pending if m.thread_id != A]
    assert [t for t, _ in section_bodies(state.observations)] == [
        t for t, _ in section_bodies(before.observations) if t != A]
    assert not _tags_of(A, state.observations) and _tags_of(B, state.observations)
    assert A not in state.threads and B in state.threads
    assert state.observation_tokens == memory.config.counter.count(state.observations)
    [deleted] = memory.of_type("om-memory-deleted")
    assert (deleted.thread_id, deleted.memory_key, deleted.data.reason) == (A, "resource:u1", "thread-deleted")
    assert deleted.data.observations == state.observations
    # The same command again changes nothing.
    memory.feed(ThreadDeleted(thread_id=A, at=T0, request_id="del-1"))
    assert memory.state == state and len(memory.of_type("om-memory-deleted")) == 1


def test_an_observation_in_flight_that_read_the_thread_fails_for_the_others_and_its_answer_is_ignored():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False))
    for n in range(6):
        memory.feed(say(n, (A, B)[n % 2]))
    memory.feed(ObserveRequested(thread_id=B, at=T0))
    [job] = memory.waiting
    memory.feed(say(6, B))  # held behind the cycle
    memory.feed(ThreadDeleted(thread_id=A, at=T0))
    failed = memory.of_type("data-om-observation-failed")
    assert [(e.thread_id, "was deleted" in e.data.error) for e in failed] == [(B, True)]
    assert memory.state.in_flight is None
    assert [m.id for m in memory.state.pending] == [say(n, B).id for n in (1, 3, 5, 6)]  # released
    memory.answer_all()
    assert memory.of_type("om-result-ignored") and memory.state.observations == ""
    memory.feed(ObserveRequested(thread_id=B, at=T0))
    memory.answer_all()
    assert sorted(observed_ids(memory)) == sorted(say(n, B).id for n in (1, 3, 5, 6))
    assert not _tags_of(A, memory.state.observations)
    assert not any(_tags_of(A, str(m.content)) for m in memory.jobs[-1].messages)


def test_an_observation_in_flight_that_never_read_the_thread_goes_on():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False))
    for n in range(4):
        memory.feed(say(n, B))
    memory.feed(ObserveRequested(thread_id=B, at=T0))
    memory.feed(say(4, A))  # held
    memory.feed(ThreadDeleted(thread_id=A, at=T0))
    assert memory.state.in_flight is not None and memory.state.held == ()
    memory.answer_all()
    assert sorted(observed_ids(memory)) == sorted(say(n, B).id for n in range(4))
    assert memory.state.pending == ()


def test_an_observation_in_flight_shown_the_threads_section_is_cancelled():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False))
    memory.feed(say(0, A))
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    memory.answer_all()
    memory.feed(say(1, B))
    memory.feed(ObserveRequested(thread_id=B, at=T0))
    [job] = memory.waiting
    assert tag("u1", A, 0) in job.messages[1].content  # A's section, as previous observations
    memory.feed(ThreadDeleted(thread_id=A, at=T0))
    assert memory.state.in_flight is None and [m.id for m in memory.state.pending] == [say(1, B).id]
    assert [e.thread_id for e in memory.of_type("data-om-observation-failed")] == [B]


def test_a_reflection_in_flight_is_cancelled_by_deleting_a_thread():
    memory = Memory(resource_engine(300, obscureThreadIds=False, reflection={"observationTokens": 600}))
    for n in range(60):
        memory.feed(say(n, (A, B)[n % 2]))
        while memory.waiting and not any(j.kind == "reflect" for j in memory.waiting):
            memory.answer(0)
        if memory.waiting:
            break
    assert [j.kind for j in memory.waiting] == ["reflect"]
    memory.feed(ThreadDeleted(thread_id=A, at=T0))
    [failed] = memory.of_type("data-om-observation-failed")
    assert failed.data.operation_type == "reflection" and memory.state.in_flight is None
    memory.answer_all()
    assert memory.state.generation == 0 and not _tags_of(A, memory.state.observations)


def test_a_message_of_a_deleted_thread_replayed_later_stays_a_duplicate():
    memory = Memory(resource_engine(100_000))
    memory.feed(say(0, A))
    memory.feed(ThreadDeleted(thread_id=A, at=T0))
    memory.feed(say(0, A))
    assert memory.state.pending == ()
    memory.feed(say(1, A))  # a new message in a thread of that id starts it again
    assert [m.id for m in memory.state.pending] == [say(1, A).id]


#: A message of A or B, or "answer the k-th job waiting" (if any).
actions = st.lists(st.one_of(st.sampled_from([A, B]), st.integers(min_value=0, max_value=3)),
                   min_size=8, max_size=60)


@settings(max_examples=80, deadline=None)
@given(actions, st.integers(min_value=0, max_value=60), st.booleans(), st.booleans())
def test_after_deleting_a_thread_nothing_of_its_messages_remains_or_reaches_a_prompt(plan, delete_at, obscure,
                                                                                     retrieval):
    memory = Memory(resource_engine(300, obscureThreadIds=obscure, reflection={"observationTokens": 700},
                                    retrieval=retrieval))
    deleted_at_job = None
    gone: set[str] = set()
    n = 0
    for i, action in enumerate([*plan, None]):
        if i == min(delete_at, len(plan)):
            gone = {_TAG.search(m.text()).group(0) for m in memory.sent if m.thread_id == A}
            memory.feed(ThreadDeleted(thread_id=A, at=T0))
            deleted_at_job = len(memory.jobs)
        if isinstance(action, str):
            memory.feed(say(n, action if deleted_at_job is None else B))  # A is not written to again
            n += 1
        elif action is not None and memory.waiting:
            memory.answer(action)
    memory.answer_all()
    memory.feed(ObserveRequested(thread_id=B, at=T0))
    memory.answer_all()
    state = memory.state
    remaining = "\n".join([state.observations, *(m.text for m in state.pending),
                           *(str(m.content) for j in memory.jobs[deleted_at_job:] for m in j.messages)])
    assert not {t for t in gone if t in remaining}
    assert f'<thread id="{shown_thread_id(A, obscure)}">' not in state.observations
    a_sent = {m.id for m in memory.sent if m.thread_id == A}
    for _, body in section_bodies(state.observations):  # with retrieval: the groups of A went with A
        assert not any({g.start, g.end} & a_sent for g in parse_groups(body))
    # B intact: each of its messages observed once, in B's section (or in the reflection of it).
    b_sent = {m.id for m in memory.sent if m.thread_id == B}
    ids = observed_ids(memory)
    assert {i for i in ids if i in b_sent} == b_sent and state.pending == ()
    assert len([i for i in ids if i in b_sent]) == len(b_sent)
    for message in memory.sent:
        if message.thread_id == B and state.generation == 0:
            assert state.observations.count(_TAG.search(message.text()).group(0)) == 1



def test_deleting_the_resource_forgets_every_thread():
    from omstream.schemas.control import ResourceDeleted

    memory = Memory(resource_engine(400, obscureThreadIds=False))
    for n in range(20):
        memory.feed(say(n, (A, B)[n % 2]))
        memory.answer_all()
    assert memory.state.observations and memory.state.pending
    memory.feed(ResourceDeleted(resource_id="u1", at=T0))
    state = memory.state
    assert (state.observations, state.pending, state.threads, state.memory_key) == ("", (), {}, "resource:u1")
    [deleted] = memory.of_type("om-memory-deleted")
    assert deleted.data.reason == "resource-deleted" and deleted.data.observations is None
    memory.feed(say(0, A))  # the user starts again: a new memory, message ids free again
    assert [m.id for m in memory.state.pending] == [say(0, A).id]
