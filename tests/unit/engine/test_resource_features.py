"""What works in thread scope works in resource scope (issue 28): extractors (one observer call
per thread, values per thread), working memory (the resource's), reflection extractors and
attachments.  Reflection and thread titles are in test_resource_scope.py."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from omstream.engine.prompting.sections import section_bodies
from omstream.schemas.control import ObserveRequested
from omstream.schemas.messages import Message
from tests.helpers import T0, scripted_result
from tests.unit.engine.resource_helpers import Memory, observed_ids, resource_engine, say

A, B = "conv-1", "conv-2"
_THREAD_TAG = re.compile(r'<thread id="([^"]*)">')
PREFS = {"name": "Preferences", "instructions": "What the user likes."}


class Profile(BaseModel):
    name: str


PROFILE = {"name": "Profile", "instructions": "The user's profile.", "schema": Profile}


def _answer(job, thread: str, extra: str) -> str:
    """The scripted observer's answer for `job`, with `extra` sections after it."""
    return scripted_result(job).output + "\n" + extra


def _both_threads(memory: Memory) -> None:
    for n in range(4):
        memory.feed(say(n, (A, B)[n % 2]))
    memory.feed(ObserveRequested(thread_id=A, at=T0))


def test_an_inline_extractor_makes_one_observer_call_per_thread_and_keeps_values_per_thread():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False, observation={"extract": [PREFS]}))
    _both_threads(memory)
    jobs = list(memory.waiting)
    assert [_THREAD_TAG.findall(j.messages[1].content) for j in jobs] == [[A], [B]]
    assert all("<preferences>" in j.messages[0].content for j in jobs)
    memory.waiting.clear()
    for job, likes in zip(jobs, ("tea", "hiking"), strict=True):
        memory.feed(scripted_result(job, output=_answer(job, "", f"<preferences>\n{likes}\n</preferences>")))
    ends = memory.of_type("data-om-observation-end")
    assert [(e.thread_id, e.data.extracted_values) for e in ends] == [
        (A, {"preferences": "tea"}), (B, {"preferences": "hiking"})]
    threads = memory.state.threads
    assert threads[A].metadata == {"extracted": {"preferences": "tea"}}
    assert threads[B].metadata == {"extracted": {"preferences": "hiking"}}
    assert sorted(observed_ids(memory)) == sorted(m.id for m in memory.sent)
    assert [t for t, _ in section_bodies(memory.state.observations)] == [A, B]
    assert "<preferences>" not in memory.state.observations
    # The next call about A shows A's prior value, not B's.
    memory.feed(say(4, A))
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    [job] = memory.waiting
    assert "<preferences>\ntea\n</preferences>" in job.messages[1].content
    assert "hiking" not in job.messages[1].content


def test_a_structured_extractor_asks_a_follow_up_per_thread_before_the_cycle_commits():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False, observation={"extract": [PROFILE]}))
    _both_threads(memory)
    first, second = memory.waiting
    memory.waiting.clear()
    memory.feed(scripted_result(first))
    [follow] = memory.waiting
    assert follow.kind == "extract" and follow.cycle_id == first.cycle_id + "/extract"
    assert not memory.of_type("data-om-observation-end") and memory.state.in_flight is not None
    memory.feed(scripted_result(first))  # the main answer again: ignored
    memory.feed(scripted_result(second))
    follow_b = memory.waiting[-1]
    memory.waiting.clear()
    memory.feed(scripted_result(follow_b, output='{"profile": {"name": "Bob"}}'))
    assert not memory.of_type("data-om-observation-end")  # A's follow-up is still out
    memory.feed(scripted_result(follow, output='{"profile": {"name": 3}}'))
    ends = memory.of_type("data-om-observation-end")
    assert [e.thread_id for e in ends] == [A, B]
    assert ends[0].data.extracted_values is None and ends[0].data.extraction_failures[0].slug == "profile"
    assert ends[1].data.extracted_values == {"profile": {"name": "Bob"}}
    assert memory.state.threads[B].metadata == {"extracted": {"profile": {"name": "Bob"}}}
    assert memory.state.in_flight is None and memory.state.pending == ()


def test_a_follow_up_that_answers_no_json_is_asked_once_more_for_json_alone():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False, observation={"extract": [PROFILE]}))
    for n in range(2):
        memory.feed(say(n, A))
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    [main] = memory.waiting
    memory.waiting.clear()
    memory.feed(scripted_result(main))
    [follow] = memory.waiting
    memory.waiting.clear()
    memory.feed(scripted_result(follow, output="Sure! The profile is Ann."))
    [again] = memory.waiting
    assert again.cycle_id == follow.cycle_id + "/again" and again.messages[1].content.endswith("no code fence.")
    memory.feed(scripted_result(follow, output='{"profile": {"name": "late"}}'))  # the first one again: ignored
    assert not memory.of_type("data-om-observation-end")
    memory.feed(scripted_result(again, output="still prose"))
    [end] = memory.of_type("data-om-observation-end")
    assert end.data.extraction_failures[0].slug == "profile" and memory.state.pending == ()
    assert len([j for j in memory.jobs if j.kind == "extract"]) == 2  # asked once more, not twice


def test_working_memory_is_the_resources_one_document_updated_by_each_threads_call():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False, observation={"manageWorkingMemory": True}))
    _both_threads(memory)
    first, second = memory.waiting
    memory.waiting.clear()
    memory.feed(scripted_result(first, output=_answer(first, "", "<working-memory>\n# User\n- likes tea\n</working-memory>")))
    memory.feed(scripted_result(second, output=_answer(second, "", "<working-memory>\n# User\n- likes tea\n- hikes\n</working-memory>")))
    assert memory.state.working_memory == "# User\n- likes tea\n- hikes"
    memory.feed(say(4, B))
    memory.feed(ObserveRequested(thread_id=B, at=T0))
    [job] = memory.waiting
    assert "- hikes" in job.messages[0].content + job.messages[1].content  # the current document


def test_reflection_extractors_store_the_resources_values():
    memory = Memory(resource_engine(300, obscureThreadIds=False,
                                    reflection={"observationTokens": 600, "extract": [PREFS]}))
    for n in range(60):
        memory.feed(say(n, (A, B)[n % 2]))
        while memory.waiting:
            job = memory.waiting.pop(0)
            output = scripted_result(job).output
            if job.kind == "reflect":
                output += "\n<preferences>\ntea\n</preferences>"
            memory.feed(scripted_result(job, output=output))
        if memory.state.generation:
            break
    assert memory.state.generation == 1
    assert memory.state.metadata == {"extracted": {"preferences": "tea"}}
    [end] = [e for e in memory.of_type("data-om-observation-end") if e.data.operation_type == "reflection"]
    assert end.data.extracted_values == {"preferences": "tea"}


def test_an_image_of_a_thread_reaches_the_observer_in_its_threads_call():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False, observation={
        "model": "scripted/observer-vision", "observeAttachments": "auto"}))
    picture = Message.model_validate({
        "id": "img-1", "threadId": B, "resourceId": "u1", "role": "user", "createdAt": T0.isoformat(),
        "content": [{"type": "text", "text": "what is this?"},
                    {"type": "image", "image": "https://example.test/cat.png", "mimeType": "image/png"}]})
    memory.feed(say(0, A))
    memory.feed(picture)
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    [job] = memory.waiting
    text, *parts = job.messages[1].content
    assert f'<thread id="{B}">' in text.text and "[Image #1: cat.png]" in text.text
    assert [p.image_url.url for p in parts if p.type == "image_url"] == ["https://example.test/cat.png"]
    memory.waiting.clear()
    memory.feed(scripted_result(job, output=(  # (the test's scripted observer reads text only)
        f'<observations>\n<thread id="{A}">\nDate: Mar 3, 2025\n* 🟡 (09:00) User wrote\n</thread>\n'
        f'<thread id="{B}">\nDate: Mar 3, 2025\n* 🔴 (09:00) User sent a picture of a cat\n</thread>\n'
        "</observations>")))
    assert sorted(observed_ids(memory)) == sorted(["img-1", say(0, A).id])
    assert dict(section_bodies(memory.state.observations))[B].endswith("a picture of a cat")


def test_an_overdue_follow_up_commits_its_thread_with_the_extractor_failed():
    from datetime import timedelta

    memory = Memory(resource_engine(100_000, obscureThreadIds=False, cycleDeadline="1m",
                                    observation={"extract": [PROFILE]}))
    for n in range(4):
        memory.feed(say(n, (A, B)[n % 2]), log_time=T0)
    memory.feed(ObserveRequested(thread_id=A, at=T0), log_time=T0)
    first, _ = memory.waiting
    memory.waiting.clear()
    memory.feed(scripted_result(first), log_time=T0 + timedelta(seconds=10))  # its follow-up never answers
    memory.feed(say(4, B), log_time=T0 + timedelta(minutes=2))
    [end] = memory.of_type("data-om-observation-end")
    assert end.thread_id == A and "deadline" in end.data.extraction_failures[0].error
    assert [e.thread_id for e in memory.of_type("data-om-observation-failed")] == [B]
    assert {m.thread_id for m in memory.state.pending} == {B} and memory.state.in_flight is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([A, B]), st.integers(min_value=0, max_value=3)),
                min_size=4, max_size=40))
def test_with_a_structured_extractor_every_message_is_observed_once_whatever_the_order(plan):
    """Answers and follow-ups in any order: each message observed once, in its thread's section,
    and each thread's value from its own follow-up."""
    memory = Memory(resource_engine(300, obscureThreadIds=False, observation={"extract": [PROFILE]}))

    def answer(k: int) -> None:
        job = memory.waiting.pop(k % len(memory.waiting))
        output = None
        if job.kind == "observe":  # the thread the call is about: the one in its new history
            history = job.messages[1].content.split("## New Message History to Observe")[1]
            thread_of_job[job.cycle_id] = _THREAD_TAG.findall(history)[0]
        else:
            output = f'{{"profile": {{"name": "{thread_of_job[job.cycle_id.removesuffix("/extract")]}"}}}}'
        memory.feed(scripted_result(job, output=output))

    thread_of_job: dict[str, str] = {}
    n = 0
    for action in plan:
        if isinstance(action, str):
            memory.feed(say(n, action))
            n += 1
        elif memory.waiting:
            answer(action)
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    while memory.waiting:
        answer(0)
    ids = observed_ids(memory)
    assert sorted(ids) == sorted(m.id for m in memory.sent) and memory.state.pending == ()
    for thread, meta in memory.state.threads.items():
        if meta.metadata:
            assert meta.metadata == {"extracted": {"profile": {"name": thread}}}
    for end in memory.of_type("data-om-observation-end"):
        assert end.data.extracted_values in (None, {"profile": {"name": end.thread_id}})
