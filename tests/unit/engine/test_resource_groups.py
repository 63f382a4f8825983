"""Observation groups in resource scope (issues 28 and 29, spec §12 and §6.10).

A resource memory's log is one `<thread id>` section per thread and date; with retrieval on,
each cycle's new observations of a thread are one group inside that thread's section, whose range
names that thread's observed messages.  Over random interleavings of two threads' messages and
the model's answers: the groups are well-formed, each lies in its thread's section and names only
that thread's messages, ids are distinct and a refold writes the same text; reflections are
`kind="reflection"` groups per section; the observer and reflector read the log untagged;
deleting a thread takes its groups with its sections.
"""

from __future__ import annotations

import re
from datetime import timedelta

from hypothesis import event, given, settings
from hypothesis import strategies as st

from omstream.engine.cycles.thread_deletion import without_thread_sections
from omstream.engine.prompting.groups import group_id, parse_groups, strip_groups, thread_cycle, wrap_group
from omstream.engine.prompting.resource_groups import resource_reflection_groups
from omstream.engine.prompting.sections import merge_section, section_bodies
from omstream.engine.rules.resolution import resolve
from omstream.projections.views.context import build_context_system_messages
from omstream.schemas.control import ObserveRequested, ThreadDeleted
from tests.helpers import T0
from tests.unit.engine.resource_helpers import Memory, resource_engine, say

A, B = "conv-1", "conv-2"
OPENING = re.compile(r"^<observation-group[ \t].*$", re.M)
CLOSING = re.compile(r"^</observation-group>[ \t]*$", re.M)
ISO = "2025-03-03T09:00:00.000Z"


def grouped_memory(**options) -> Memory:
    options.setdefault("obscureThreadIds", False)
    return Memory(resource_engine(options.pop("threshold", 350), retrieval=True, **options))


def _message(n: int, thread: str, day_break: int = 10_000):
    message = say(n, thread)
    if n >= day_break:  # from here on, the next day: sections of a new date
        message = message.model_copy(update={"created_at": message.created_at + timedelta(days=1)})
    return message


def _run(memory: Memory, plan, day_break: int = 10_000) -> None:
    n = 0
    for action in plan:
        if isinstance(action, str):
            memory.feed(_message(n, action, day_break))
            n += 1
        elif memory.waiting:
            memory.answer(action)
    memory.answer_all()
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    memory.answer_all()


# --- merging a group into a thread's section ------------------------------------------------------
def test_a_group_continuing_a_sections_date_moves_in_whole_without_its_date_line():
    first = wrap_group("Date: Mar 3, 2025\n* 🔴 (09:00) one", "1" * 16, "m1:m2")
    log = merge_section("", "a", first, ISO)
    assert log == f'<thread id="a">\n{first}\n</thread>'
    second = wrap_group("Date: Mar 3, 2025\n* 🔴 (10:00) two", "2" * 16, "m3:m4")
    merged = merge_section(log, "a", second, ISO)
    assert merged == ('<thread id="a">\n' + first + "\n"
                      + '<observation-group id="2222222222222222" range="m3:m4">\n* 🔴 (10:00) two\n'
                      + "</observation-group>\n</thread>")
    assert [g.id for g in parse_groups(merged)] == ["1" * 16, "2" * 16]
    later = merge_section(merged, "a", wrap_group("Date: Mar 4, 2025\n* 🔴 (08:00) three", "3" * 16, "m5:m5"),
                          "2025-03-04T08:00:00.000Z")
    assert len(section_bodies(later)) == 2 and len(parse_groups(later)) == 3
    assert merge_section(later, "a", wrap_group("Date: Mar 4, 2025", "4" * 16, "m6:m6"), ISO) == later


def test_text_of_two_groups_is_merged_as_plain_text():
    two = wrap_group("Date: Mar 3, 2025\n* x", "1" * 16, "a:b") + "\n" + wrap_group("* y", "2" * 16, "c:d")
    assert merge_section("", "a", two, ISO) == f'<thread id="a">\n{two}\n</thread>'


def test_a_reflection_groups_each_section_over_its_threads_groups_and_the_rest_over_all():
    source = (merge_section("", "a", wrap_group("Date: Mar 3, 2025\n* a1", "1" * 16, "a1:a3"), ISO)
              + "\n\n" + merge_section("", "b", wrap_group("Date: Mar 3, 2025\n* b1", "2" * 16, "b1:b2"), ISO)
              + "\n\n" + merge_section("", "a", wrap_group("Date: Mar 4, 2025\n* a4", "3" * 16, "a4:a9"), ISO))
    text = '* common fact\n\n<thread id="a">\nDate: Mar 3, 2025\n* a\n</thread>\n\n<thread id="b">\n* b\n</thread>'
    out = resource_reflection_groups(text, source, "resource:u1", "c-7")
    groups = parse_groups(out)
    assert [(g.range, g.kind) for g in groups] == [("a1:a9", "reflection"), ("a1:a9", "reflection"),
                                                   ("b1:b2", "reflection")]
    assert groups[1].id == group_id("resource:u1", thread_cycle("c-7/1", "a"))  # piece 1: the run before it is 0
    assert len({g.id for g in groups}) == 3
    assert [t for t, _ in section_bodies(out)] == ["a", "b"]
    assert strip_groups(out) == text
    assert resource_reflection_groups(text, "no groups here", "resource:u1", "c-7") == text


# --- through the fold -------------------------------------------------------------------------
def test_one_cycle_over_two_threads_writes_one_group_per_thread_inside_its_section():
    memory = grouped_memory(threshold=100_000)
    for n, thread in enumerate([A, B, A, B, A]):
        memory.feed(say(n, thread))
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    (job,) = memory.waiting
    memory.answer_all()
    ends = memory.of_type("data-om-observation-end")
    assert len(ends) == 2 and len({e.data.cycle_id for e in ends}) == 1
    for end in ends:
        (group,) = parse_groups(end.data.observations)
        ids = end.data.observed_message_ids
        assert group.range == f"{ids[0]}:{ids[-1]}"
        assert group.id == group_id("resource:u1", thread_cycle(end.data.cycle_id, end.thread_id))
        assert group.kind is None
    text = memory.state.observations
    sections = dict(section_bodies(text))
    assert set(sections) == {A, B}
    assert {g.id for g in parse_groups(text)} == {parse_groups(e.data.observations)[0].id for e in ends}
    print(f"two threads in one cycle: {len(parse_groups(text))} groups, ids "
          f"{[g.id for g in parse_groups(text)]}")


def test_the_observer_and_reflector_read_the_log_untagged_and_the_actor_as_group_sections():
    memory = grouped_memory(threshold=300, reflection={"observationTokens": 700})
    _run(memory, [A, B, A, 0, B, A, B, 0, A, A, B, B, 0, A, B, A, B, A, B, A, B, A, B, A, B], day_break=12)
    reflections = [j for j in memory.jobs if j.kind == "reflect"]
    observations = [j for j in memory.jobs if j.kind == "observe"]
    assert reflections and len(observations) > 2
    for job in memory.jobs:
        assert "observation-group" not in str(job.messages[1].content)
    text = memory.state.observations
    assert any(g.kind == "reflection" for g in parse_groups(text)), text
    retrieval = resolve(memory.config.om).retrieval
    system = build_context_system_messages(text, retrieval=retrieval)
    shown = "\n".join(system or [])
    for group in parse_groups(text):
        assert f"## Group `{group.id}`\n_range: `{group.range}`_" in shown
    assert not OPENING.search(shown) and "</observation-group>" not in shown
    assert build_context_system_messages("", retrieval=retrieval) is not None  # guidance before observations


def test_deleting_a_thread_removes_its_groups_with_its_sections():
    memory = grouped_memory(threshold=300)
    _run(memory, [A, B, A, B, 0, A, B, A, B, 0, A, B])
    before = {g.id: g for g in parse_groups(memory.state.observations)}
    memory.feed(ThreadDeleted(thread_id=A, at=T0 + timedelta(hours=1)))
    after = parse_groups(memory.state.observations)
    a_ids = {m.id for m in memory.sent if m.thread_id == A}
    assert after and all(g.start not in a_ids and g.end not in a_ids for g in after)
    assert {g.id for g in after} < set(before)
    assert memory.state.observations == without_thread_sections(memory.state.observations, A)


# --- properties -------------------------------------------------------------------------------
actions = st.lists(st.one_of(st.sampled_from([A, B]), st.integers(min_value=0, max_value=3)),
                   min_size=8, max_size=60)


def _well_formed(text: str) -> None:
    groups = parse_groups(text)
    assert len(OPENING.findall(text)) == len(CLOSING.findall(text)) == len(groups), text
    assert strip_groups(text).count("observation-group") == 0


@settings(max_examples=100, deadline=None)
@given(actions, st.integers(min_value=0, max_value=45), st.booleans())
def test_groups_are_well_formed_per_thread_and_the_same_on_a_refold(plan, day_break, reflect):
    reflection = {"observationTokens": 250 if reflect else 100_000}
    memory = grouped_memory(threshold=300, reflection=reflection)
    _run(memory, plan, day_break)
    text = memory.state.observations
    _well_formed(text)
    event(f"groups: {min(len(parse_groups(text)), 8)}")
    event(f"reflection groups: {sum(g.kind == 'reflection' for g in parse_groups(text)) > 0}")
    thread_of = {m.id: m.thread_id for m in memory.sent}
    observed = {i for e in memory.of_type("data-om-observation-end") for i in e.data.observed_message_ids}
    for thread, body in section_bodies(text):
        for group in parse_groups(body):
            # A range names that thread's observed messages, never another thread's.
            assert thread_of[group.start] == thread_of[group.end] == thread, (thread, group)
            assert {group.start, group.end} <= observed
    outside = strip_groups(text)
    for _, body in section_bodies(outside):
        assert "observation-group" not in body
    ids = [g.id for g in parse_groups(text)]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)
    for end in memory.of_type("data-om-observation-end"):
        if end.data.operation_type == "observation" and end.data.observations:
            (group,) = parse_groups(end.data.observations)
            assert {thread_of[group.start], thread_of[group.end]} == {end.thread_id}
    again = grouped_memory(threshold=300, reflection=reflection)
    _run(again, plan, day_break)
    assert again.state.observations == text  # ids are drawn from the log, not at random
