"""Recall over a resource memory (scope `resource`, spec §12 and §6.10): the groups of its
threads' sections lead back to their messages, threads mode lists the resource's threads, a
thread or cursor of another resource is refused, and the actor's context shows the groups."""

import pytest

from omstream.engine.prompting.groups import parse_groups
from omstream.engine.prompting.sections import section_bodies
from omstream.engine.rules.resolution import resolve
from omstream.projections.recall import RecallError, parse_params, recall
from omstream.projections.views.context import ContextProjection
from tests.helpers import engine
from tests.unit.projections.recall_helpers import msg, project_resources, resource_caller, source_of

GROUPED = engine(150, scope="resource", retrieval=True, obscureThreadIds=False)
RETRIEVAL = resolve(GROUPED.om).retrieval


def two_resources():
    """u1's threads a and b alternate; u2's thread c writes alongside."""
    messages = []
    for n in range(12):
        messages.append(msg("a" if n % 2 == 0 else "b", n // 2, f"message {n} about topic {n % 5} " * 6,
                            minutes=2 * n))
        messages.append(msg("c", n, f"other user {n} " * 6, resource="u2", minutes=2 * n + 1))
    projection = ContextProjection(retrieval=RETRIEVAL)
    states = project_resources(messages, GROUPED, projection)
    return projection, states


async def ask(projection, thread, **params):
    return await recall(source_of(projection), resource_caller(projection, thread), parse_params(params))


async def test_every_group_of_a_thread_leads_recall_to_its_messages():
    projection, states = two_resources()
    log = states["u1"].observations
    sections = section_bodies(log)
    assert {t for t, _ in sections} == {"a", "b"}
    followed = 0
    for thread, body in sections:
        for group in parse_groups(body):
            for end in (group.start, group.end):
                assert end.startswith(f"{thread}-")  # the thread's own messages
                part = await ask(projection, "a", cursor=end, threadId=thread, partIndex=0)
                assert part["messageId"] == end
                followed += 1
            hint = await ask(projection, "a", cursor=group.range, threadId=thread)
            assert f'start="{group.start}"' in hint["messages"] and f'end="{group.end}"' in hint["messages"]
    assert followed >= 4
    print(f"followed {followed} range ends of {len(parse_groups(log))} groups of u1")


async def test_a_cursor_in_a_sibling_thread_asks_for_its_thread_id_and_pages_with_it():
    projection, _ = two_resources()
    note = await ask(projection, "a", cursor="b-m002")
    assert note["count"] == 0 and 'Pass threadId="b"' in note["messages"]
    page = await ask(projection, "a", cursor="b-m002", threadId="b", limit=2)
    assert page["count"] == 2 and "[b-m003]" in page["messages"] and "[a-" not in page["messages"]
    current = await ask(projection, "b", threadId="current", limit=1)
    assert "[b-m000]" in current["messages"]


async def test_threads_mode_lists_the_resource_threads_and_never_another_resources():
    projection, _ = two_resources()
    answer = await ask(projection, "a", mode="threads")
    assert answer["count"] == 2 and "id: a" in answer["threads"] and "id: b" in answer["threads"]
    assert "id: c" not in answer["threads"] and "- **(untitled)** ← current\n  id: a" in answer["threads"]
    assert (await ask(projection, "a", mode="threads", threadId="current"))["count"] == 1
    assert (await ask(projection, "c", mode="threads"))["count"] == 1


async def test_another_resources_thread_and_cursor_are_not_seen():
    projection, _ = two_resources()
    with pytest.raises(RecallError, match="does not belong to the active resource"):
        await ask(projection, "a", threadId="c")
    with pytest.raises(RecallError, match="Could not resolve cursor"):
        await ask(projection, "a", cursor="c-m003")
    with pytest.raises(RecallError, match="does not belong to the active resource"):
        await ask(projection, "a", cursor="c-m003", threadId="c", partIndex=0)


def test_the_actor_sees_its_threads_groups_as_sections_and_guidance_from_the_start():
    projection, states = two_resources()
    window = "\n".join(projection.threads["a"].window().system)
    own = [g for t, body in section_bodies(states["u1"].observations) if t == "a" for g in parse_groups(body)]
    assert own
    for group in own:
        assert f"## Group `{group.id}`\n_range: `{group.range}`_" in window
    assert "</observation-group>" not in window and "recall" in window
    fresh = ContextProjection(retrieval=RETRIEVAL)
    project_resources([msg("z", 0, "hello", resource="u9")], GROUPED, fresh)
    (guidance,) = fresh.threads["z"].window().system
    assert "recall" in guidance
