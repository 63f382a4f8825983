"""Observation groups (spec §12): wrapped by the fold with retrieval on, deterministic ids,
ranges naming observed messages, shown to the actor as `## Group` sections, stripped for the
reflector."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.engine.fold import fold, new_state
from omstream.engine.prompting.groups import (
    combine_ranges,
    group_id,
    group_safe_line_count,
    parse_groups,
    render_groups,
    strip_groups,
    wrap_group,
)
from tests.helpers import engine, message, scripted_result

OPEN = re.compile(r'^<observation-group id="([0-9a-f]{16})" range="([^"]+)"( kind="reflection")?>$', re.M)


def test_wrap_parse_strip_and_render_round_trip():
    text = wrap_group("* 🔴 User's dog is Biscuit", "0123456789abcdef", "m1:m4")
    assert text == '<observation-group id="0123456789abcdef" range="m1:m4">\n* 🔴 User\'s dog is Biscuit\n</observation-group>'
    (group,) = parse_groups(text)
    assert (group.id, group.range, group.start, group.end, group.kind) == ("0123456789abcdef", "m1:m4", "m1", "m4", None)
    assert strip_groups(text) == "* 🔴 User's dog is Biscuit"
    assert render_groups(text) == "## Group `0123456789abcdef`\n_range: `m1:m4`_\n\n* 🔴 User's dog is Biscuit"
    assert render_groups("plain text") is None


def test_a_group_without_its_closing_tag_is_hidden_not_shown():
    broken = '<observation-group id="aaaaaaaaaaaaaaaa" range="a:b">\n* kept line'
    assert parse_groups(broken) == []
    assert strip_groups(broken) == "* kept line"
    whole = wrap_group("* x", "bbbbbbbbbbbbbbbb", "c:d")
    assert render_groups(f"{broken}\n\n{whole}") == "* kept line\n\n## Group `bbbbbbbbbbbbbbbb`\n_range: `c:d`_\n\n* x"


def test_reflection_kind_and_combined_range():
    groups = parse_groups(wrap_group("a", "1" * 16, "m1:m3") + "\n\n" + wrap_group("b", "2" * 16, "m4:m9"))
    assert combine_ranges(groups) == "m1:m9"
    text = wrap_group("c", "3" * 16, "m1:m9", kind="reflection")
    assert parse_groups(text)[0].kind == "reflection"
    assert combine_ranges([]) == ""


def test_group_ids_are_16_hex_and_a_function_of_memory_and_cycle():
    a = group_id("thread:t1", "cycle-1")
    assert re.fullmatch(r"[0-9a-f]{16}", a)
    assert a == group_id("thread:t1", "cycle-1") != group_id("thread:t2", "cycle-1") != group_id("thread:t1", "cycle-2")


def test_a_buffered_reflection_slice_never_cuts_a_group():
    log = wrap_group("* a\n* b\n* c", "1" * 16, "m1:m2") + "\n\n" + wrap_group("* d", "2" * 16, "m3:m3")
    lines = log.split("\n")
    assert group_safe_line_count(log, 2) == 5  # inside the first group: to its closing tag
    assert group_safe_line_count(log, 5) == 5
    assert group_safe_line_count(log, 6) == 6  # the blank line between groups
    assert lines[4] == "</observation-group>"


# --- through the fold -------------------------------------------------------------------------
def run(messages, config, deliver_every: int = 1):
    state = new_state("thread:t1", "t1", "u1")
    events, requests, queue = [], [], []
    for i, msg in enumerate(messages):
        out = fold(state, msg, config)
        state = out.state
        events += list(out.events)
        queue += list(out.jobs)
        if i % deliver_every == 0:
            while queue:
                job = queue.pop(0)
                requests.append(job)
                out = fold(state, scripted_result(job), config)
                state = out.state
                events += list(out.events)
                queue += list(out.jobs)
    while queue:
        job = queue.pop(0)
        requests.append(job)
        out = fold(state, scripted_result(job), config)
        state, events, queue = out.state, events + list(out.events), queue + list(out.jobs)
    return state, events, requests


def test_a_blocking_observation_writes_one_group_over_its_messages():
    msgs = [message(i, words=80) for i in range(6)]
    state, events, _ = run(msgs, engine(300, retrieval=True))
    groups = parse_groups(state.observations)
    assert groups, state.observations
    ends = [e for e in events if e.type == "data-om-observation-end"]
    first = ends[0].data
    (g,) = parse_groups(first.observations)
    assert g.range == f"{first.observed_message_ids[0]}:{first.observed_message_ids[-1]}"
    assert g.id == group_id("thread:t1", first.cycle_id)
    assert first.observation_tokens > 0


def test_without_retrieval_there_are_no_groups():
    state, _, _ = run([message(i, words=80) for i in range(6)], engine(300))
    assert state.observations and "observation-group" not in state.observations


def test_buffered_chunks_are_groups_and_the_reflector_sees_them_stripped():
    config = engine(400, retrieval=True, observation={"bufferTokens": 0.25},
                    reflection={"observationTokens": 400})
    state, events, requests = run([message(i, words=70) for i in range(40)], config)
    assert any(e.type == "data-om-activation" and e.data.operation_type == "observation" and
               parse_groups(e.data.observations or "") for e in events)
    reflections = [j for j in requests if j.kind in ("reflect", "buffer-reflection")]
    assert reflections, "the scenario reflects"
    for job in reflections:
        assert "observation-group" not in job.messages[1].content
    for job in requests:
        assert "<observation-group" not in job.messages[1].content
    kinds = [g.kind for g in parse_groups(state.observations)]
    assert "reflection" in kinds, state.observations[:400]


# --- the property -----------------------------------------------------------------------------
@st.composite
def scenarios(draw):
    n = draw(st.integers(min_value=1, max_value=30))
    words = draw(st.lists(st.integers(min_value=5, max_value=120), min_size=n, max_size=n))
    buffered = draw(st.booleans())
    every = draw(st.integers(min_value=1, max_value=4))
    return [message(i, words=w) for i, w in enumerate(words)], buffered, every


def _config(buffered: bool):
    observation = {"bufferTokens": 0.25} if buffered else {}
    return engine(300, retrieval=True, observation=observation, reflection={"observationTokens": 400})


@settings(max_examples=50, deadline=None)
@given(scenarios())
def test_groups_are_well_formed_name_observed_messages_and_refold_identically(case):
    messages, buffered, every = case
    config = _config(buffered)
    state, events, _ = run(messages, config, every)
    observed = {i for e in events if e.type == "data-om-observation-end" and e.data.operation_type == "observation"
                for i in e.data.observed_message_ids}
    observed |= {i for e in events if e.type == "data-om-activation" and e.data.operation_type == "observation"
                 for i in e.data.activated_message_ids}
    opens = OPEN.findall(state.observations)
    groups = parse_groups(state.observations)
    assert len(opens) == len(groups) == state.observations.count("</observation-group>")
    assert strip_groups(state.observations).count("observation-group") == 0
    for g in groups:
        assert g.start in observed and g.end in observed, (g.range, sorted(observed))
    again, again_events, _ = run(messages, config, every)
    assert again.observations == state.observations
    assert [e.model_dump_json() for e in again_events] == [e.model_dump_json() for e in events]


def test_a_range_of_ids_with_colons_splits_at_its_middle_colon():
    from omstream.engine.prompting.groups import split_range

    assert split_range("m1:m4") == ("m1", "m4")
    assert split_range("t1:3:t1:9") == ("t1:3", "t1:9")
    (g,) = parse_groups(wrap_group("x", "a" * 16, "t1:3:t1:9"))
    assert (g.start, g.end) == ("t1:3", "t1:9")
