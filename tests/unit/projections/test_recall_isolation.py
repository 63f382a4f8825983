"""Isolation (issue 29, acceptance 3): over random interleavings of two resources' threads, no
recall answer ever holds a message of a memory the caller may not see: in thread scope another
thread's, in resource scope another resource's; whatever the cursor, threadId or mode asked.
The second property folds each resource into one resource-scope memory with retrieval on, so
its threads' sections carry observation groups whose ranges are asked as cursors too."""

import re

from hypothesis import event, given, settings
from hypothesis import strategies as st

from omstream.engine.prompting.groups import parse_groups
from omstream.engine.prompting.sections import section_bodies
from omstream.engine.rules.resolution import resolve
from omstream.projections.recall import RecallError, parse_params, recall
from omstream.projections.views.context import ContextProjection
from tests.helpers import engine
from tests.unit.projections.recall_helpers import ask, msg, project, project_resources, resource_caller, source_of

#: thread -> resource: u1 has a and b, u2 has c and d.
THREADS = {"a": "u1", "b": "u1", "c": "u2", "d": "u2"}
SHOWN = [re.compile(r"\*\* \[([^\]]+)\]:"), re.compile(r"^  id: (\S+)$", re.M)]


@st.composite
def histories(draw):
    order = draw(st.lists(st.sampled_from(sorted(THREADS)), min_size=4, max_size=40))
    counts: dict[str, int] = {}
    messages = []
    for minute, thread in enumerate(order):
        n = counts.get(thread, 0)
        counts[thread] = n + 1
        words = draw(st.integers(min_value=1, max_value=60))
        messages.append(msg(thread, n, " ".join(["word"] * words), resource=THREADS[thread], minutes=minute))
    calls = draw(st.lists(st.fixed_dictionaries({}, optional={
        "mode": st.sampled_from(["messages", "threads"]),
        "cursor": st.sampled_from([m.id for m in messages] + ["a-m000:c-m000"]),
        "threadId": st.sampled_from([*THREADS, "current"]),
        "page": st.integers(min_value=-3, max_value=3),
        "limit": st.integers(min_value=1, max_value=20),
        "anchor": st.sampled_from(["start", "end"]),
        "detail": st.sampled_from(["low", "high"]),
        "partIndex": st.integers(min_value=0, max_value=2),
    }), min_size=1, max_size=12))
    return messages, calls


def ids_in(answer: dict) -> set[str]:
    found = {answer["messageId"]} if "messageId" in answer else set()
    for field in ("messages", "threads", "text"):
        for pattern in SHOWN:
            found |= set(pattern.findall(str(answer.get(field, ""))))
    return found


@settings(max_examples=80, deadline=None)
@given(histories(), st.sampled_from(sorted(THREADS)), st.sampled_from(["thread", "resource"]))
async def test_no_recall_answer_holds_another_memorys_message(case, caller, scope):
    messages, calls = case
    source = source_of(project(messages)[0])
    visible_threads = {caller} if scope == "thread" else {t for t, r in THREADS.items() if r == THREADS[caller]}
    allowed = {m.id for m in messages if m.thread_id in visible_threads} | visible_threads
    if caller not in {m.thread_id for m in messages}:
        return  # the route answers 404 for a thread the read side does not hold
    for call in calls:
        try:
            answer = await ask(source, caller, scope=scope, resource=THREADS[caller], **call)
        except RecallError:
            continue
        leaked = ids_in(answer) - allowed
        assert not leaked, (call, leaked, answer)


#: Resource memories with groups: observations happen, and their ranges become cursors.
GROUPED = engine(120, scope="resource", retrieval=True, obscureThreadIds=False)


@settings(max_examples=60, deadline=None)
@given(histories(), st.sampled_from(sorted(THREADS)))
async def test_a_resource_memory_with_groups_never_shows_another_resources_message(case, caller):
    messages, calls = case
    projection = ContextProjection(retrieval=resolve(GROUPED.om).retrieval)
    states = project_resources(messages, GROUPED, projection)
    if caller not in projection.threads:
        return  # the route answers 404 for a thread the read side does not hold
    mine = THREADS[caller]
    allowed = {m.id for m in messages if THREADS[m.thread_id] == mine} | {t for t, r in THREADS.items() if r == mine}
    groups = [(thread, g) for state in states.values()
              for thread, body in section_bodies(state.observations) for g in parse_groups(body)]
    for thread, group in groups:  # a group names its own thread's messages only
        assert group.start.startswith(f"{thread}-") and group.end.startswith(f"{thread}-"), group
    event(f"groups: {min(len(groups), 6)}")
    # Every range of both resources, as a cursor, with and without the group's thread.
    calls = calls + [call for thread, g in groups for call in (
        {"cursor": g.range}, {"cursor": g.start, "threadId": thread}, {"cursor": g.end, "partIndex": 0})]
    source, who = source_of(projection), resource_caller(projection, caller)
    for call in calls:
        try:
            answer = await recall(source, who, parse_params(call))
        except RecallError:
            continue
        leaked = ids_in(answer) - allowed
        assert not leaked, (call, leaked, answer)
    window = "\n".join(projection.threads[caller].window().system)
    assert not any(f"[{m.id}]" in window or m.id in window for m in messages if THREADS[m.thread_id] != mine)
