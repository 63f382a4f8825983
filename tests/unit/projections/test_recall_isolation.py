"""Isolation (issue 29, acceptance 3): over random interleavings of two resources' threads, no
recall answer ever holds a message of a memory the caller may not see: in thread scope another
thread's, in resource scope another resource's; whatever the cursor, threadId or mode asked."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.projections.recall import RecallError
from tests.unit.projections.recall_helpers import ask, msg, project, source_of

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
