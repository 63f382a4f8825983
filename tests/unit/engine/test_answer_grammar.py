"""The grammar of the local model's Observer and Reflector answers (`answer_grammar`): what it
lets through parses clean, what the parser would repair cannot come out, an Observer's dates and
times are its messages', and only a local model's jobs carry it.

A grammar is turned into a Python regular expression (`gbnf_regex`) to be checked: answers are
matched against it, and drawn from it at random with hypothesis."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from omstream.engine.fold import fold
from omstream.engine.prompting import answer_grammar
from omstream.engine.prompting.parsing import _content, parse_observer_output, parse_outcome
from omstream.engine.prompting.thread_answers import parse_reflection_sections, parse_thread_answer
from omstream.schemas.control import ObserveRequested, ReflectRequested
from omstream.schemas.messages import Message
from tests.helpers import engine, fold_inputs, message, scripted_result, text_of
from tests.unit.engine.gbnf_regex import to_regex
from tests.unit.engine.resource_helpers import Memory, resource_engine, say

LOCAL = "local/qwen2.5-1.5b"
DATES = {"Mar 9, 2024": ("21:15", "21:16"), "Mar 10, 2024": ("08:00",)}
GOOD = """<observations>
Date: Mar 9, 2024
* 🔴 (21:15) User stated their dog Rex is nine
  * -> looked up senior dog food
  * ✅ vet booked for Friday
* 🟡 (21:16) Assistant suggested a softer bed
Date: Mar 10, 2024
* 🟢 (08:00) User might move in spring
</observations>
<current-task>
Primary: find a bed for Rex
</current-task>"""


def matches(grammar: str, answer: str) -> bool:
    return re.fullmatch(to_regex(grammar), answer) is not None


# --- the observer's grammar ------------------------------------------------------------------
def test_an_answer_that_keeps_the_contract_matches_and_parses_clean():
    grammar = answer_grammar.observer_grammar(DATES, hints=True)
    assert matches(grammar, GOOD) and parse_outcome(GOOD) == "clean"
    assert matches(grammar, GOOD.split("<current-task>")[0].rstrip())  # the hints are optional
    assert not matches(answer_grammar.observer_grammar(DATES, hints=False), GOOD)  # not asked for


@pytest.mark.parametrize("answer", [
    pytest.param(GOOD.replace("(21:16)", "(21:17)"), id="a time no message has"),
    pytest.param(GOOD.replace("(08:00)", "(21:15)"), id="another date's time"),
    pytest.param(GOOD.replace("Date: Mar 10, 2024", "Date: Mar 11, 2024"), id="a date no message has"),
    pytest.param(GOOD.replace("(21:15)", "(9:15 PM)"), id="a 12-hour time"),
    pytest.param(GOOD.replace("* 🟡 (21:16)", "- 🟡 (21:16)"), id="another bullet"),
    pytest.param(GOOD.replace("* 🟡 (21:16) ", "* (21:16) "), id="no priority"),
    pytest.param(GOOD.replace("Date: Mar 9, 2024", "Date: 2024-03-09"), id="another date form"),
    pytest.param("Rex is nine and the user will move in spring.", id="prose"),
    pytest.param(GOOD.replace("<observations>\n", ""), id="no tags"),
    pytest.param("Here are the observations:\n" + GOOD, id="chatter before"),
    pytest.param(GOOD + "\nHope this helps!", id="chatter after"),
    pytest.param(GOOD.replace("Date: Mar 9, 2024\n", '<thread id="t1">\nDate: Mar 9, 2024\n'), id="thread tags"),
    pytest.param(GOOD.replace("nine", "nine </observations> x"), id="a tag inside a line"),
    pytest.param(GOOD.replace("Date: Mar 10, 2024\n* 🟢 (08:00) User might move in spring\n", "")
                 .replace("Date: Mar 9, 2024\n", "Date: Mar 10, 2024\n* 🟢 (08:00) x\nDate: Mar 9, 2024\n"),
                 id="dates out of order"),
    pytest.param(GOOD.replace("Date: Mar 10, 2024\n", "Date: Mar 10, 2024\n").replace(
        "</observations>", "Date: Mar 10, 2024\n* 🟢 (08:00) again\n</observations>"), id="a date twice"),
    pytest.param("<observations>\nDate: Mar 9, 2024\n</observations>", id="a date without lines"),
])
def test_what_the_parser_would_repair_cannot_come_out(answer):
    assert not matches(answer_grammar.observer_grammar(DATES, hints=True), answer)


def test_the_number_of_lines_is_bounded():
    lines = "".join(f"* 🟡 (08:00) fact number {n}\n" for n in range(answer_grammar.MAX_OBSERVATION_LINES))
    grammar = answer_grammar.observer_grammar({"Mar 10, 2024": ("08:00",)}, hints=False)
    assert matches(grammar, f"<observations>\nDate: Mar 10, 2024\n{lines}</observations>")
    assert not matches(grammar, f"<observations>\nDate: Mar 10, 2024\n{lines}* 🟡 (08:00) one more\n</observations>")
    long = "x" * answer_grammar.MAX_TEXT_CHARS
    assert matches(grammar, f"<observations>\nDate: Mar 10, 2024\n* 🟡 (08:00) {long}\n</observations>")
    assert not matches(grammar, f"<observations>\nDate: Mar 10, 2024\n* 🟡 (08:00) {long}y\n</observations>")


def _distinct(answer: str) -> bool:
    """No observation repeats another's content: the parser drops a repeat (a grammar cannot
    rule out saying the same thing twice)."""
    contents = [_content(line) for line in answer.split("\n") if line.startswith("* ")]
    long = [c for c in contents if len(c) >= 12]
    return len(long) == len(set(long))


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@PROPERTY
@given(st.data())
def test_every_answer_the_observer_grammar_allows_parses_clean(data):
    grammar = answer_grammar.observer_grammar(DATES, hints=True, sections=("preferences",))
    answer = data.draw(st.from_regex(to_regex(grammar), fullmatch=True))
    assume(_distinct(answer))
    parsed = parse_observer_output(answer.split("\n<preferences>")[0])  # the fold strips its sections
    assert parsed.observations and parsed.recovered == (), answer
    times = set(re.findall(r"^\* \S+ \((\d\d:\d\d)\)", parsed.observations, re.MULTILINE))
    assert times <= {"21:15", "21:16", "08:00"}


@PROPERTY
@given(st.data())
def test_every_answer_the_multi_thread_grammar_allows_parses_clean(data):
    grammar = answer_grammar.resource_observer_grammar(
        {"3f2a9c1e": {"Mar 3, 2025": ("09:00",)}, "user\\42 b": DATES}, hints=True, title=True)
    answer = data.draw(st.from_regex(to_regex(grammar), fullmatch=True))
    assume(all(_distinct(part) for part in answer.split("<thread id=")))
    threads = parse_thread_answer(answer, ("3f2a9c1e", "user\\42 b"))
    assert isinstance(threads, dict) and threads, answer
    assert all(t.output.recovered == () for t in threads.values()), answer


@PROPERTY
@given(st.data())
def test_every_answer_the_reflector_grammar_allows_is_read_without_dropping_anything(data):
    """A reflection may hold paragraph lines (the compression levels ask for them), which the
    parser keeps as they are; a sub-bullet that ends in a time in parentheses is the one thing
    it rewrites (its time moves to the front), so the property allows that repair only."""
    grammar = answer_grammar.reflector_grammar(hints=True, dates=("Mar 9, 2024", "Mar 10, 2024"))
    answer = data.draw(st.from_regex(to_regex(grammar), fullmatch=True))
    assume(_distinct(answer))
    parsed = parse_observer_output(answer)
    assert parsed.observations, answer
    assert set(parsed.recovered) <= {"time-format"}, answer
    kept = [line.strip() for line in parsed.observations.split("\n") if line.strip()]
    written = answer.split("<observations>\n")[1].split("\n</observations>")[0]
    assert len(kept) == len([line for line in written.split("\n") if line.strip()]), answer


def test_a_resource_reflection_keeps_the_log_thread_sections():
    grammar = answer_grammar.reflector_grammar(hints=False, dates=("Mar 3, 2025",), thread_ids=("t-1", "t-2"))
    answer = ("<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) User lives in Lyon\n"
              '<thread id="t-2">\nDate: Mar 3, 2025\n* 🟡 (09:05) Trip to Rome planned\n</thread>\n</observations>')
    assert matches(grammar, answer)
    assert parse_reflection_sections(answer).observations.count('<thread id="t-2">') == 1
    assert not matches(grammar, answer.replace("t-2", "t-3"))


# --- reading the request -----------------------------------------------------------------------
def _at(i: int, when: datetime) -> Message:
    return Message(id=f"t1-m{i}", thread_id="t1", resource_id="u1", role="user" if i % 2 == 0 else "assistant",
                   content=f"[{i}] " + text_of(60, i), created_at=when)


def _groups(grammar: str) -> dict[str, list[str]]:
    """Date → times, as the grammar lists them."""
    dates = re.findall(r'^obs-group-(\d+) ::= "Date: ([^"]+)"', grammar, re.MULTILINE)
    times = dict(re.findall(r"^obs-time-(\d+) ::= \((.*)\)$", grammar, re.MULTILINE))
    return {date: re.findall(r'"(\d\d:\d\d)"', times[n]) for n, date in dates}


def test_a_local_observers_job_carries_the_dates_and_times_of_its_messages_in_the_configured_zone():
    # 04:50-05:12 UTC is 23:50 on Mar 2 to 00:12 on Mar 3 in New York (UTC-5 before Mar 9).
    base = datetime(2025, 3, 3, 4, 50, tzinfo=UTC)
    offsets = (0, 0.5, 8, 15, 15.7, 22)
    messages = [_at(i, base + timedelta(minutes=m)) for i, m in enumerate(offsets)]
    cfg = engine(100_000, timeZone="America/New_York", observation={"model": LOCAL})
    observe = ObserveRequested(thread_id="t1", at=messages[-1].created_at + timedelta(seconds=1))
    _, _, jobs, _ = fold_inputs([*messages, observe], cfg)
    assert [j.kind for j in jobs] == ["observe"] and jobs[0].model == LOCAL
    grammar = jobs[0].settings["grammar"]
    assert _groups(grammar) == {"Mar 2, 2025": ["23:50", "23:58"], "Mar 3, 2025": ["00:05", "00:12"]}
    answer = ("<observations>\nDate: Mar 2, 2025\n* 🔴 (23:58) User said hello\nDate: Mar 3, 2025\n"
              "* 🟡 (00:12) Assistant answered\n</observations>")
    assert matches(grammar, answer) and parse_outcome(answer) == "clean"
    assert not matches(grammar, answer.replace("(00:12)", "(05:12)"))  # the UTC time
    assert "<current-task>" in grammar  # continuation hints are on by default


def test_a_hosted_models_job_is_unchanged():
    _, _, jobs, _ = fold_inputs([message(i) for i in range(6)], engine(300))
    assert [j.kind for j in jobs] == ["observe"] and "grammar" not in jobs[0].settings


def test_a_grammar_replaces_the_worked_example_in_the_prompt():
    # The example teaches the format, which the grammar holds; a small model copies its content.
    example = "Example, from ANOTHER conversation"
    inputs = [message(i) for i in range(6)]
    local = fold_inputs(inputs, engine(300, observation={"model": LOCAL}))[2][0]
    hosted = fold_inputs(inputs, engine(300))[2][0]
    off = fold_inputs(inputs, engine(300, observation={"model": LOCAL, "modelSettings": {"grammar": ""}}))[2][0]
    assert "grammar" in local.settings and example not in local.messages[0].content
    assert example in hosted.messages[0].content and example in off.messages[0].content
    assert "Miso" not in local.messages[0].content and "Miso" in hosted.messages[0].content


def test_a_users_own_grammar_wins():
    own = 'root ::= "<observations>" [^<]* "</observations>"'
    cfg = engine(300, observation={"model": LOCAL, "modelSettings": {"grammar": own}})
    _, _, jobs, _ = fold_inputs([message(i) for i in range(6)], cfg)
    assert jobs[0].settings["grammar"] == own


def test_the_prompts_sections_are_the_grammars_and_the_json_follow_up_has_none():
    extract = [{"name": "Preferences", "instructions": "What the user likes."},
               {"name": "Profile", "instructions": "The profile.", "schema": {"type": "object"}}]
    cfg = engine(300, observation={"model": LOCAL, "extract": extract, "threadTitle": True})
    state, _, jobs, _ = fold_inputs([message(i) for i in range(6)], cfg)
    root = jobs[0].settings["grammar"].split("\n")[0]
    assert root.endswith("hint-current-task? hint-suggested-response? section-thread-title? section-preferences?")
    answer = """<observations>
Date: Mar 3, 2025
* 🔴 (09:00) User likes green tea
</observations>
<preferences>
green tea
</preferences>"""
    assert matches(jobs[0].settings["grammar"], answer)
    follow = fold(state, scripted_result(jobs[0], output=answer), cfg).jobs
    assert [j.kind for j in follow] == ["extract"]
    assert "response_format" in follow[0].settings and "grammar" not in follow[0].settings


def test_a_local_reflectors_job_keeps_to_the_logs_dates():
    cfg = engine(300, observation={"model": LOCAL}, reflection={"model": LOCAL})
    state, _, jobs, _ = fold_inputs([message(i) for i in range(6)], cfg)
    answer = "<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) User likes green tea\n</observations>"
    state = fold(state, scripted_result(jobs[0], output=answer), cfg).state
    out = fold(state, ReflectRequested(thread_id="t1", at=state.last_activity_at or datetime.now(UTC)), cfg)
    reflect = [j for j in out.jobs if j.kind == "reflect"]
    assert reflect, out.events
    grammar = reflect[0].settings["grammar"]
    assert 'r-date ::= ("Mar 3, 2025")' in grammar
    assert matches(grammar, "<observations>\nDate: Mar 3, 2025\n* 🔴 (10:30) User likes tea\n</observations>")
    assert not matches(grammar, "<observations>\nDate: Mar 4, 2025\n* 🔴 (10:30) User likes tea\n</observations>")


def test_a_resource_observers_grammar_names_the_batchs_threads_only():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False, observation={"model": LOCAL}))
    for n in range(4):
        memory.feed(say(n, "conv-1" if n % 2 else "conv-2"))
    memory.feed(ObserveRequested(thread_id="conv-1", at=memory.sent[-1].created_at + timedelta(seconds=1)))
    [job] = [j for j in memory.jobs if j.kind == "observe"]
    grammar = job.settings["grammar"]
    assert sorted(re.findall(r'<thread id=\\"([^\\]*)\\">', grammar)) == ["conv-1", "conv-2"]
    answer = ('<observations>\n<thread id="conv-2">\nDate: Mar 3, 2025\n* 🔴 (09:00) User said hi\n'
              "</thread>\n</observations>")
    assert matches(grammar, answer)
    assert not matches(grammar, answer.replace("conv-2", "conv-9"))
    assert not matches(grammar, answer.replace("(09:00)", "(09:03)"))  # conv-2's messages are at 09:00 and 09:01


def test_a_request_without_a_dated_message_gets_no_grammar():
    assert answer_grammar.request_grammar("system", "## New Message History to Observe\n\n\n\n---\n\n## Your Task",
                                          reflector=False, resource=False) is None
    assert answer_grammar.request_grammar("system", "no history here", reflector=False, resource=False) is None
