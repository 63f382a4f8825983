"""Resource scope over random interleavings (issue 28, acceptance 1 to 4).

Threads of one user write in any order, the model answers in any order, and still every message
is observed exactly once, in its own thread's section; memories of different users never see each
other; the batching rule holds for any thread sizes; obscured thread ids never reach a model.
"""

from __future__ import annotations

import re
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.engine.prompting.sections import section_bodies, shown_thread_id
from omstream.engine.prompting.window import other_conversations
from omstream.engine.rules.resource import pending_by_thread, plan_batches, thread_tokens
from omstream.schemas.control import ObserveRequested
from tests.helpers import T0
from tests.unit.engine.resource_helpers import Memory, observed_ids, resource_engine, say

A, B = "conv-1", "conv-2"
_TAG = re.compile(r"R(\d)T(\d)N(\d{4})")

#: Messages of thread A or B, or "answer the k-th job waiting" (if any).
actions = st.lists(st.one_of(st.sampled_from([A, B]), st.integers(min_value=0, max_value=3)),
                   min_size=4, max_size=50)


def _message(n: int, thread: str, day_break: int, resource: str = "u1", words: int = 30):
    message = say(n, thread, resource, words=words)
    if n >= day_break:  # from here on, the next day: sections of a new date
        message = message.model_copy(update={"created_at": message.created_at + timedelta(days=1)})
    return message


def _run(memory: Memory, plan, day_break: int, check=None) -> None:
    n = 0
    for action in plan:
        if isinstance(action, str):
            memory.feed(_message(n, action, day_break, memory.resource))
            n += 1
        elif memory.waiting:
            memory.answer(action)
        if check:
            check(memory)


def _flush(memory: Memory) -> None:
    memory.answer_all()
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    memory.answer_all()


def _others_show_exactly_the_other_threads_pending(memory: Memory) -> None:
    state = memory.state
    for thread in (A, B):
        shown = {m.group(0) for m in _TAG.finditer(other_conversations(state, thread, memory.config))}
        expected = {_TAG.search(m.text).group(0) for m in state.pending if m.thread_id != thread}
        assert shown == expected


@settings(max_examples=60, deadline=None)
@given(actions, st.integers(min_value=0, max_value=60))
def test_every_message_is_observed_exactly_once_in_its_threads_section(plan, day_break):
    memory = Memory(resource_engine(350, obscureThreadIds=False))
    _run(memory, plan, day_break, _others_show_exactly_the_other_threads_pending)
    _flush(memory)
    ids = observed_ids(memory)
    assert len(ids) == len(set(ids)), "a message was observed twice"
    assert set(ids) == {m.id for m in memory.sent} and memory.state.pending == ()
    text = memory.state.observations
    for message in memory.sent:
        assert text.count(_TAG.search(message.text()).group(0)) == 1
    for thread, body in section_bodies(text):
        assert {t for _, t, _ in _TAG.findall(body)} <= {thread[-1]}
    for thread in {m.thread_id for m in memory.sent}:
        dates = {m.created_at.date() for m in memory.sent if m.thread_id == thread}
        sections = [b for t, b in section_bodies(text) if t == thread]
        assert 1 <= len(sections) <= len(dates)  # one day's observations merge into one section


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["u1", "u2", "u3"]), st.integers(0, 2), st.booleans()),
                min_size=3, max_size=45))
def test_no_memory_ever_shows_another_resources_messages_threads_or_observations(plan):
    memories = {r: Memory(resource_engine(300, reflection={"observationTokens": 900},
                                          obscureThreadIds=r != "u2"), resource=r)
                for r in ("u1", "u2", "u3")}
    threads = {r: [f"{r}-conv-{k}" for k in range(1, 4)] for r in memories}
    for n, (resource, k, answer) in enumerate(plan):
        memory = memories[resource]
        memory.feed(say(n, threads[resource][k], resource))
        if answer:
            memory.answer_all()
    for memory in memories.values():
        _flush(memory)
    for resource, memory in memories.items():
        seen = "\n".join([
            *(e.model_dump_json() for e in memory.events),
            *(str(m.content) for j in memory.jobs for m in j.messages),
            *(other_conversations(memory.state, t, memory.config) for t in threads[resource]),
            memory.state.observations,
        ])
        for other in memories:
            if other == resource:
                continue
            assert f"R{other[-1]}T" not in seen  # no message, and so no observation, of another
            for thread in threads[other]:
                assert thread not in seen and shown_thread_id(thread, True) not in seen


@settings(max_examples=40, deadline=None)
@given(actions, st.integers(min_value=0, max_value=60))
def test_obscured_thread_ids_never_reach_the_observer_or_the_reflector(plan, day_break):
    memory = Memory(resource_engine(300, reflection={"observationTokens": 700}))
    _run(memory, plan, day_break)
    _flush(memory)
    prompts = [str(m.content) for j in memory.jobs for m in j.messages]
    assert prompts or not memory.sent
    for prompt in prompts:
        assert A not in prompt and B not in prompt
    # (The system prompts spell the tag with "..." for an id.)
    threads_shown = {t for p in prompts for t in re.findall(r'<thread id="([^"]*)">', p)} - {"..."}
    assert threads_shown <= {shown_thread_id(A, True), shown_thread_id(B, True)}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=6),
       st.integers(min_value=0, max_value=3000), st.integers(min_value=1, max_value=1500))
def test_batches_follow_the_rule_for_any_thread_sizes(counts, threshold, max_per_batch):
    memory = Memory(resource_engine(10**9, obscureThreadIds=False))
    threads = [f"conv-{k}" for k in range(len(counts))]
    schedule = [t for t, c in zip(threads, counts, strict=True) for _ in range(c)]
    for n, thread in enumerate(sorted(schedule, key=lambda t: (hash(t) % 7, t))):
        memory.feed(say(n, thread, words=20 + 5 * int(thread[-1])))
    state = memory.state
    groups = pending_by_thread(state)
    size = {t: thread_tokens(m) for t, m in groups.items()}
    batches = plan_batches(state, threshold, max_per_batch)
    flat = [t for b in batches for t in b]
    # Largest first until the threshold: the picked set is the shortest such prefix.
    by_size = sorted(groups, key=lambda t: -size[t])
    prefix = next((k for k in range(1, len(by_size) + 1) if sum(size[t] for t in by_size[:k]) >= threshold),
                  len(by_size))
    assert set(flat) == set(by_size[:prefix]) and len(flat) == len(set(flat))
    # In order of their oldest message.
    assert flat == [t for t in groups if t in set(flat)]
    # A batch of several threads stays within the limit; the next thread would not have fit.
    for batch in batches:
        assert len(batch) == 1 or sum(size[t] for t in batch) <= max_per_batch
    for first, second in zip(batches, batches[1:], strict=False):
        assert sum(size[t] for t in first) + size[second[0]] > max_per_batch
