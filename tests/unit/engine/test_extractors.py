"""Extractors (spec §9) in the fold: inline and structured values, previous values, metadata
paths, hooks, failures, the thread title, and what the read side sees."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from omstream.conversations.simulation import simulate
from omstream.engine.fold import fold
from omstream.engine.prompting.prompts import observer_system_prompt
from omstream.engine.rules import extraction
from omstream.projections.views.context import ContextProjection
from omstream.schemas.config import OmConfigError, load_om_config, slugify
from omstream.schemas.control import ThreadPatched
from tests.helpers import engine, fold_inputs, message, scripted_result

ANSWER = """<observations>
Date: Mar 3, 2025
* 🔴 (09:00) User said they like green tea and hiking
</observations>
<preferences>
green tea, hiking
</preferences>
<thread-title>
Tea and hiking plans
</thread-title>"""


class Profile(BaseModel):
    name: str
    likes: list[str]


def config(*extract, title: bool = False, reflect: tuple = (), **observation):
    return engine(300, observation={"extract": list(extract), "threadTitle": title, **observation},
                  reflection={"extract": list(reflect)})


PREFS = {"name": "Preferences", "instructions": "What the user likes."}
PROFILE = {"name": "Profile", "instructions": "The user's profile.", "schema": Profile}


def observe(cfg, output=ANSWER, messages=6):
    """Fold messages up to a blocking observation; answer it with `output`: (state, events, job)."""
    state, _, jobs, _ = fold_inputs([message(i) for i in range(messages)], cfg)
    assert [j.kind for j in jobs] == ["observe"]
    out = fold(state, scripted_result(jobs[0], output=output), cfg)
    return out.state, list(out.events), list(out.jobs), jobs[0]


def end_of(events, kind="data-om-observation-end"):
    return next(e for e in events if e.type == kind)


# --- definition (§9.1) -------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "slug"), [
    ("User Profile", "user-profile"), ("Tom's  \"list\"", "toms-list"), ("  Trips 2025!  ", "trips-2025")])
def test_slug_rules(name, slug):
    assert slugify(name) == slug


@pytest.mark.parametrize("name", ["Thread Title", "observations", "Current Task", "123 go"])
def test_reserved_or_invalid_slugs_are_refused(name):
    with pytest.raises(OmConfigError):
        load_om_config({"observation": {"extract": [{"name": name, "instructions": "x y"}]}})


def test_duplicate_slugs_are_refused():
    with pytest.raises(OmConfigError, match="both give the slug"):
        load_om_config({"observation": {"extract": [{"name": "A b", "instructions": "x y"},
                                                    {"name": "a-B", "instructions": "x y"}]}})


def test_instructions_and_schema_may_be_functions_of_the_runtime_context():
    seen = []

    def instructions(ctx):
        seen.append(ctx)
        return f"Likes of the user in {ctx['threadId']}."

    cfg = config({"name": "Prefs", "instructions": instructions},
                 {"name": "Profile", "instructions": "p q", "schema": lambda ctx: Profile})
    specs = extraction.specs(cfg.om, "observer", {"source": "observer", "threadId": "t1", "resourceId": "u1"})
    assert [(s.slug, s.mode) for s in specs] == [("prefs", "inline"), ("profile", "structured")]
    assert specs[0].instructions == "Likes of the user in t1."
    assert seen[0]["source"] == "observer"


# --- inline values ------------------------------------------------------------------------------
def test_an_inline_extractor_is_asked_for_in_the_prompt_and_read_from_the_answer():
    cfg = config(PREFS)
    state, events, jobs, job = observe(cfg)
    system = job.messages[0].content
    assert "=== EXTRA SECTIONS ===" in system and "<preferences>\nWhat the user likes.\n</preferences>" in system
    assert job.messages[1].content.endswith("write the <preferences> section the instructions describe.")
    end = end_of(events)
    assert end.data.extracted_values == {"preferences": "green tea, hiking"}
    assert end.data.extraction_failures is None
    assert "green tea, hiking" not in end.data.observations  # the section is not an observation
    assert state.metadata == {"extracted": {"preferences": "green tea, hiking"}}
    assert jobs == []  # no structured extractor: no follow-up


def test_without_extractors_nothing_changes():
    state, events, _, job = observe(engine(300))
    assert job.messages[0].content == observer_system_prompt()
    end = end_of(events)
    assert end.data.extracted_values is None and end.data.extraction_failures is None
    assert state.metadata == {}


def test_previous_values_are_shown_to_the_next_run_unless_disabled():
    cfg = config(PREFS)
    state, _, _, _ = observe(cfg)
    more = fold_inputs_from(state, [message(i) for i in range(6, 12)], cfg)
    prompt = more[2][0].messages[1].content
    assert "## Prior Thread Metadata" in prompt and "<preferences>\ngreen tea, hiking\n</preferences>" in prompt

    hidden = config({**PREFS, "includePreviousExtraction": False})
    state, _, _, _ = observe(hidden)
    more = fold_inputs_from(state, [message(i) for i in range(6, 12)], hidden)
    assert "<preferences>\ngreen" not in more[2][0].messages[1].content


def fold_inputs_from(state, inputs, cfg):
    events, jobs = [], []
    for item in inputs:
        out = fold(state, item, cfg)
        state, events, jobs = out.state, events + list(out.events), jobs + list(out.jobs)
    return state, events, jobs


def test_metadata_key_path_places_the_value_or_keeps_it_out():
    state, events, _, _ = observe(config({**PREFS, "metadataKeyPath": "profile.likes"}))
    assert state.metadata == {"profile": {"likes": "green tea, hiking"}}
    state, events, _, _ = observe(config({**PREFS, "metadataKeyPath": False}))
    assert state.metadata == {}
    assert end_of(events).data.extracted_values == {"preferences": "green tea, hiking"}


def test_an_empty_value_is_dropped():
    state, events, _, _ = observe(config(PREFS), ANSWER.replace("green tea, hiking", "  "))
    assert end_of(events).data.extracted_values is None and state.metadata == {}


# --- structured follow-up (§9.3) -----------------------------------------------------------------
def structured_run(cfg, answer, *, ok=True):
    state, events, jobs, _ = observe(cfg)
    assert [j.kind for j in jobs] == ["extract"], "the main answer waits for its follow-up"
    assert not any(e.type == "data-om-observation-end" for e in events)
    assert state.in_flight is not None and state.in_flight.answer is not None
    follow = jobs[0]
    out = fold(state, scripted_result(follow, ok=ok, output=answer, error=None if ok else "HTTP 500"), cfg)
    return follow, out


def test_a_structured_extractor_runs_a_follow_up_job_and_its_value_is_validated():
    follow, out = structured_run(config(PREFS, PROFILE), '{"profile": {"name": "Ann", "likes": ["tea"]}}')
    schema = follow.settings["response_format"]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["profile"]
    assert "## Extractors\n\n- profile: The user's profile." in follow.messages[1].content
    end = end_of(out.events)
    assert end.data.extracted_values == {"preferences": "green tea, hiking",
                                         "profile": {"name": "Ann", "likes": ["tea"]}}
    assert out.state.in_flight is None
    assert out.state.metadata["extracted"]["profile"] == {"name": "Ann", "likes": ["tea"]}
    # The cycle lasted both calls.
    assert end.data.duration_ms == 3000


def test_a_structured_value_that_does_not_fit_fails_alone():
    _, out = structured_run(config(PREFS, PROFILE), '{"profile": {"name": 3}}')
    end = end_of(out.events)
    assert end.data.extracted_values == {"preferences": "green tea, hiking"}
    assert [f.slug for f in end.data.extraction_failures] == ["profile"]
    assert "schema" in end.data.extraction_failures[0].error
    assert out.state.metadata == {"extracted": {"preferences": "green tea, hiking"}}


def test_a_failed_follow_up_fails_the_structured_extractors_and_the_observation_still_commits():
    _, out = structured_run(config(PREFS, PROFILE), None, ok=False)
    end = end_of(out.events)
    assert end.data.observations.startswith("Date: Mar 3, 2025")
    assert [(f.slug, f.error) for f in end.data.extraction_failures] == [("profile", "HTTP 500")]
    assert end.data.extracted_values == {"preferences": "green tea, hiking"}


def test_a_json_schema_in_a_file_is_checked_too():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    _, out = structured_run(config({"name": "Home", "instructions": "Where the user lives.", "schema": schema}),
                            '```json\n{"home": {"city": 5}}\n```')
    assert [f.slug for f in end_of(out.events).data.extraction_failures] == ["home"]


def test_an_answer_that_is_no_json_object_is_asked_for_once_more_then_fails():
    cfg = config(PREFS, PROFILE)
    follow, out = structured_run(cfg, "Sure! The profile is Ann, who likes tea.")
    assert not any(e.type == "data-om-observation-end" for e in out.events)
    again = [j for j in out.jobs if j.kind == "extract"]
    assert len(again) == 1 and again[0].messages[1].content.endswith(extraction.JSON_ONLY)
    assert again[0].request_hash != follow.request_hash
    done = fold(out.state, scripted_result(again[0], output="still prose"), cfg)
    end = end_of(done.events)
    assert [f.slug for f in end.data.extraction_failures] == ["profile"]
    assert "not JSON" in end.data.extraction_failures[0].error
    assert end.data.extracted_values == {"preferences": "green tea, hiking"}
    assert not any(j.kind == "extract" for j in done.jobs)  # asked once more, not twice


@pytest.mark.parametrize(("flag", "asked_again"), [(True, True), (False, False)])
def test_an_empty_object_is_asked_for_again_only_when_an_extractor_says_so(flag, asked_again):
    cfg = config({**PROFILE, "retryStructuredExtractionOnEmptyObject": flag})
    _, out = structured_run(cfg, "{}")
    assert any(j.kind == "extract" for j in out.jobs) is asked_again
    if asked_again:
        again = next(j for j in out.jobs if j.kind == "extract")
        out = fold(out.state, scripted_result(again, output='{"profile": {"name": "Ann", "likes": []}}'), cfg)
        assert end_of(out.events).data.extracted_values == {"profile": {"name": "Ann", "likes": []}}
    else:
        assert end_of(out.events).data.extracted_values is None


def test_the_main_answer_delivered_again_during_the_follow_up_changes_nothing():
    cfg = config(PROFILE)
    state, _, jobs, job = observe(cfg)
    again = fold(state, scripted_result(job, output=ANSWER), cfg)
    assert again.events == () and again.jobs == () and again.state == state


# --- hooks (§9.2) ---------------------------------------------------------------------------------
def test_on_extracted_replaces_the_value_and_a_raising_hook_fails_only_its_extractor():
    calls = []

    def upper(ctx):
        calls.append(ctx)
        return ctx["current"].upper()

    def broken(ctx):
        raise RuntimeError("no profile today")

    cfg = config({**PREFS, "onExtracted": upper},
                 {"name": "Mood", "instructions": "The user's mood.", "onExtracted": broken})
    answer = ANSWER + "\n<mood>\ncalm\n</mood>"
    state, events, _, _ = observe(cfg, answer)
    end = end_of(events)
    assert end.data.extracted_values == {"preferences": "GREEN TEA, HIKING"}
    assert [(f.slug, f.error) for f in end.data.extraction_failures] == [
        ("mood", "onExtracted failed: RuntimeError: no profile today")]
    assert calls[0]["source"] == "observer" and calls[0]["threadId"] == "t1" and calls[0]["previous"] is None
    assert state.metadata == {"extracted": {"preferences": "GREEN TEA, HIKING"}}


def test_a_hook_mode_extractor_sees_the_raw_observations_and_stores_nothing():
    seen = []
    cfg = config({"name": "Audit", "mode": "hook", "onExtracted": lambda ctx: seen.append(ctx["current"])})
    state, events, _, _ = observe(cfg)
    assert seen and seen[0].startswith("Date: Mar 3, 2025")
    assert state.metadata == {} and end_of(events).data.extracted_values is None


# --- the thread title ---------------------------------------------------------------------------
def test_thread_title_updates_the_title_with_an_event():
    state, events, _, job = observe(config(title=True))
    assert "<thread-title>" in job.messages[0].content
    update = end_of(events, "data-om-thread-update")
    assert (update.data.old_title, update.data.new_title) == (None, "Tea and hiking plans")
    assert state.title == "Tea and hiking plans"
    assert end_of(events).data.extracted_values == {"thread-title": "Tea and hiking plans"}


def test_a_pinned_title_is_never_overwritten():
    cfg = config(title=True)
    pin = ThreadPatched(thread_id="t1", title="Mine", title_pinned=True, at=message(2).created_at)
    state, events, jobs, _ = fold_inputs([*(message(i) for i in range(3)), pin, message(3)], cfg)
    assert [e.data.new_title for e in events if e.type == "data-om-thread-update"] == ["Mine"]
    assert "<thread-title>\nMine\n</thread-title>" in jobs[0].messages[1].content  # shown, kept
    out = fold(state, scripted_result(jobs[0], output=ANSWER), cfg)
    assert not any(e.type == "data-om-thread-update" for e in out.events)
    assert out.state.title == "Mine"


def test_a_title_too_short_or_unchanged_is_not_applied():
    _, events, _, _ = observe(config(title=True), ANSWER.replace("Tea and hiking plans", "Hi"))
    assert not any(e.type == "data-om-thread-update" for e in events)


# --- reflection.extract -------------------------------------------------------------------------
def test_reflection_extractors_run_with_reflections():
    cfg = engine(300, observation={}, reflection={"observationTokens": 40, "extract": [
        {"name": "Topics", "instructions": "The topics of the whole log."}]})
    state, _, jobs, _ = fold_inputs([message(i) for i in range(6)], cfg)
    out = fold(state, scripted_result(jobs[0]), cfg)
    reflect = [j for j in out.jobs if j.kind == "reflect"]
    assert reflect and "<topics>" in reflect[0].messages[0].content
    answer = "<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) User talked\n</observations>\n<topics>\ntea\n</topics>"
    done = fold(out.state, scripted_result(reflect[0], output=answer), cfg)
    end = [e for e in done.events if e.type == "data-om-observation-end"][0]
    assert end.data.operation_type == "reflection"
    assert end.data.extracted_values == {"topics": "tea"}
    assert done.state.metadata == {"extracted": {"topics": "tea"}}


# --- the read side --------------------------------------------------------------------------------
def test_the_context_shows_extracted_values_and_the_title():
    state, events, _, _ = observe(config(PREFS, title=True))
    projection = ContextProjection()
    for event in events:
        projection.apply_event(event)
    view = projection.view("t1")
    snapshot = view.snapshot()
    assert snapshot["extractedValues"] == {"preferences": "green tea, hiking", "thread-title": "Tea and hiking plans"}
    assert snapshot["title"] == "Tea and hiking plans"
    assert "<preferences>\ngreen tea, hiking\n</preferences>" in view.window().system
    assert not any("thread-title" in s for s in view.window().system)


# --- through litellm, with the scripted models ------------------------------------------------
def test_simulate_runs_inline_structured_and_title_extractors_through_the_model_path():
    om = load_om_config({"tokenCounter": "tokenx", "reflection": {"model": "scripted/reflector"},
                         "observation": {"model": "scripted/observer", "messageTokens": 300, "bufferTokens": False,
                                         "threadTitle": True, "extract": [PREFS, PROFILE]}})
    sim = asyncio.run(simulate([message(i) for i in range(12)], om))
    assert [j.kind for j in sim.jobs] == ["observe", "extract", "observe", "extract"]
    ends = [e for e in sim.events if e.type == "data-om-observation-end"]
    assert [sorted(e.data.extracted_values) for e in ends] == [["preferences", "profile", "thread-title"]] * 2
    assert all(e.data.extraction_failures is None for e in ends)
    # The scripted observer keeps the prior title it is shown: one title change.
    assert len([e for e in sim.events if e.type == "data-om-thread-update"]) == 1
    state = next(iter(sim.states.values()))
    assert set(state.metadata["extracted"]) == {"preferences", "profile"}


# --- working memory (§9.4) ------------------------------------------------------------------------
WM = "<working-memory>\n# User Information\n- **First Name**: Ann\n- **Interests**: tea\n</working-memory>"


def test_manage_working_memory_keeps_a_markdown_document_per_thread():
    cfg = engine(300, observation={"manageWorkingMemory": True})
    state, events, _, job = observe(cfg, ANSWER + "\n" + WM)
    assert "<working-memory>" in job.messages[0].content and "- **Occupation**:" in job.messages[0].content
    assert "Current working memory:\n(empty)" in job.messages[0].content
    document = "# User Information\n- **First Name**: Ann\n- **Interests**: tea"
    assert state.working_memory == document and state.metadata == {}
    assert end_of(events).data.extracted_values == {"working-memory": document}
    assert "First Name" not in end_of(events).data.observations
    _, _, jobs = fold_inputs_from(state, [message(i) for i in range(6, 12)], cfg)
    assert f"Current working memory:\n{document}" in jobs[0].messages[0].content
    projection = ContextProjection()
    for event in events:
        projection.apply_event(event)
    assert projection.view("t1").snapshot()["workingMemory"] == document


def test_a_json_working_memory_is_a_structured_value_and_null_keeps_it():
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": False}
    cfg = engine(300, observation={"manageWorkingMemory": True}, workingMemory={"schema": schema})
    follow, out = structured_run(cfg, '{"working-memory": {"name": "Ann"}}')
    assert follow.settings["response_format"]["json_schema"]["schema"]["properties"]["working-memory"] == {
        "anyOf": [schema, {"type": "null"}]}
    assert out.state.working_memory == {"name": "Ann"}
    state, _, jobs = fold_inputs_from(out.state, [message(i) for i in range(6, 12)], cfg)
    later = fold(state, scripted_result(jobs[0], output=ANSWER), cfg)
    extract = [j for j in later.jobs if j.kind == "extract"][0]
    assert 'Current working memory: {"name":"Ann"}' in extract.messages[1].content
    kept = fold(later.state, scripted_result(extract, output='{"working-memory": null}'), cfg)
    assert kept.state.working_memory == {"name": "Ann"}
    assert end_of(list(kept.events)).data.extracted_values is None
