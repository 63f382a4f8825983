"""The observation-time rule (`engine.prompting.observation_times`): an Observer's dates and times held to
the messages they were made from."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.engine.prompting.observation_times import (
    MessageTimes,
    check_messages,
    check_sections,
    check_times,
    mentioned_dates,
    message_times,
)
from omstream.engine.state import PendingMessage

MAY2 = date(2026, 5, 2)
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def header(day: date) -> str:
    return f"Date: {MONTHS[day.month - 1]} {day.day}, {day.year}"


def at(*stamps: tuple[date, str], texts: tuple[str, ...] = ()) -> MessageTimes:
    return MessageTimes(tuple((d, time.fromisoformat(t)) for d, t in stamps), texts)


def demo() -> MessageTimes:
    return at((MAY2, "18:00"), (MAY2, "18:02"), (MAY2, "18:06"))


# --- the rule, case by case --------------------------------------------------------------------
def test_the_demos_invented_times_become_the_nearest_message_time():
    text = ("Date: May 2, 2026\n* 🔴 (18:35) User stated they fly to Lyon\n* 🟡 (18:50) Assistant listed trains\n"
            "* 🟡 (18:03) Assistant asked when\n* 🟢 (17:40) User might go by car")
    out = check_times(text, demo())
    assert out.text == ("Date: May 2, 2026\n* 🔴 (18:06) User stated they fly to Lyon\n"
                        "* 🟡 (18:06) Assistant listed trains\n* 🟡 (18:03) Assistant asked when\n"
                        "* 🟢 (18:00) User might go by car")
    assert out.count == 3


def test_a_text_within_its_messages_is_the_same_string():
    text = "Date: May 2, 2026\n* 🔴 (18:00) User stated X\n  * -> ran ls\n\n* ✅ (18:06) Done"
    out = check_times(text, demo())
    assert out.text is text and out.count == 0


def test_an_invented_date_moves_to_the_nearest_message_date_and_counts_every_line():
    times = at((MAY2, "18:00"), (date(2026, 5, 4), "09:00"), (date(2026, 5, 4), "09:30"))
    text = ("Date: May 5, 2026\n* 🔴 (09:10) User stated A\n* 🟡 (21:00) User stated B\n  * -> sub\n"
            "Date: May 3, 2026\n* 🔴 (18:00) User stated C")
    out = check_times(text, times)
    assert out.text == ("Date: May 4, 2026\n* 🔴 (09:10) User stated A\n* 🟡 (09:30) User stated B\n  * -> sub\n"
                        "Date: May 2, 2026\n* 🔴 (18:00) User stated C")  # May 3: as near to both, the earlier
    assert out.count == 3


def test_a_date_the_messages_name_is_kept_with_its_times():
    times = at((MAY2, "18:00"), (MAY2, "18:06"), texts=("I fly on 10 May 2026, back the 12th",))
    text = "Date: May 2, 2026\n* 🔴 (18:01) User will fly\nDate: May 10, 2026\n* 🔴 (07:15) User flies to Lyon"
    out = check_times(text, times)
    assert out.text is text and out.count == 0


def test_every_common_form_of_a_mention_is_read():
    found = mentioned_dates(["May 2", "3 May 2026", "May 4th, 2026", "2026-05-05", "the 6th of May",
                             "05/07/2026", "8.5.2026", "Sept. 9", "December 10 2025"])
    assert {(5, 2, None), (5, 3, 2026), (5, 4, 2026), (5, 5, 2026), (5, 6, None), (5, 7, 2026), (7, 5, 2026),
            (5, 8, 2026), (9, 9, None), (12, 10, 2025)} <= found
    assert mentioned_dates(["March 2026", "May 20", "in may 2026 or so", "version 1.2.3.2026"]) == {(5, 20, None)}


def test_a_mention_of_another_year_does_not_keep_a_date():
    times = at((MAY2, "18:00"), texts=("back on May 10, 2025",))
    out = check_times("Date: May 10, 2026\n* 🔴 (18:00) A", times)
    assert out.text == "Date: May 2, 2026\n* 🔴 (18:00) A" and out.count == 1


def test_sub_bullets_prose_and_relative_dates_are_left_alone():
    text = ("Date: May 2, 2026\n* 🔴 (18:02) User stated they moved last week, yesterday was busy\n"
            "  * 🟡 (23:00) a sub-bullet with a time\n  * -> ran the search\nA paragraph at (23:59).")
    out = check_times(text, demo())
    assert out.text is text and out.count == 0


def test_lines_before_any_date_are_held_to_the_span_of_some_message_date():
    times = at((MAY2, "09:00"), (MAY2, "10:00"), (date(2026, 5, 3), "20:00"), (date(2026, 5, 3), "21:00"))
    text = "* 🔴 (09:30) A\n* 🔴 (20:30) B\n* 🔴 (15:00) C\n* 🔴 (23:00) D"
    out = check_times(text, times)
    assert out.text == "* 🔴 (09:30) A\n* 🔴 (20:30) B\n* 🔴 (10:00) C\n* 🔴 (21:00) D" and out.count == 2


def test_what_is_not_a_clock_time_or_a_real_date_is_corrected():
    out = check_times("Date: Feb 30, 2026\n* 🔴 (25:00) A\n* 🔴 (09:75) B", at((date(2026, 3, 1), "09:00"),
                                                                              (date(2026, 3, 1), "12:00")))
    assert out.text == "Date: Mar 1, 2026\n* 🔴 (12:00) A\n* 🔴 (09:00) B" and out.count == 2


def test_without_message_times_a_text_is_returned_unchanged():
    text = "Date: Jan 1, 1999\n* 🔴 (03:00) A"
    out = check_times(text, MessageTimes(()))
    assert out.text is text and out.count == 0


def test_each_thread_section_is_held_to_its_own_messages():
    text = ('Shared fact\n<thread id="a">\nDate: May 2, 2026\n* 🔴 (18:30) A\n</thread>\n'
            '<thread id="b">\nDate: May 2, 2026\n* 🔴 (18:30) B\n</thread>\n'
            '<thread id="c">\nDate: May 2, 2026\n* 🔴 (01:00) C\n</thread>')
    out = check_sections(text, {"a": demo(), "b": at((MAY2, "18:20"), (MAY2, "18:40"))})
    assert out.text == text.replace("(18:30) A", "(18:06) A") and out.count == 1
    assert check_sections(out.text, {"a": demo()}).text is out.text


def _pending(n: int, created_at: datetime, **fields) -> PendingMessage:
    return PendingMessage(id=f"m{n}", role="user", created_at=created_at, text=fields.pop("text", "hi"), tokens=1,
                          **fields)


def test_message_times_are_the_transcripts_in_its_time_zone_and_signals_have_none():
    late = datetime(2026, 5, 2, 22, 30, 59, tzinfo=UTC)
    messages = [_pending(0, late), _pending(1, late + timedelta(hours=5), title="Signal", text="5 hours later"),
                _pending(2, late + timedelta(minutes=1), lines=(("User", "see you 2026-05-09"),))]
    seen = message_times(messages, "Europe/Paris")
    assert seen.times == ((date(2026, 5, 3), time(0, 30)), (date(2026, 5, 3), time(0, 31)))
    assert "see you 2026-05-09" in seen.texts
    out = check_messages("Date: May 2, 2026\n* 🔴 (22:30) A\nDate: May 9, 2026\n* 🔴 (10:00) B",
                         messages, "Europe/Paris")
    assert out.text == "Date: May 3, 2026\n* 🔴 (00:31) A\nDate: May 9, 2026\n* 🔴 (10:00) B" and out.count == 1


# --- properties --------------------------------------------------------------------------------
BASE = date(2026, 5, 1)
_TIMED = re.compile(r"^\* (?:\S+ )?\((\d{2}):(\d{2})\)")


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


@st.composite
def messages(draw) -> MessageTimes:
    stamps = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1439)), min_size=1, max_size=8))
    named = draw(st.lists(st.integers(-6, 10), max_size=3))
    forms = ("{mon} {d}", "{d} {mon} {y}", "{y}-{m:02d}-{d:02d}", "{mon} {d}th, {y}")
    texts = tuple(draw(st.sampled_from(forms)).format(mon=MONTHS[day.month - 1], d=day.day, m=day.month, y=day.year)
                  for day in (BASE + timedelta(days=n) for n in named))
    return MessageTimes(tuple((BASE + timedelta(days=d), time(m // 60, m % 60)) for d, m in stamps), texts)


_LINE = st.one_of(
    st.tuples(st.sampled_from(["🔴", "🟡", "🟢", "✅"]), st.integers(0, 1500)).map(
        lambda p: f"* {p[0]} ({p[1] // 60:02d}:{p[1] % 60:02d}) fact"),
    st.just("  * -> a step (23:59)"), st.just("a prose line"), st.just(""),
)


@st.composite
def observations(draw) -> str:
    lines = draw(st.lists(_LINE, max_size=3))
    for _ in range(draw(st.integers(0, 4))):
        lines.append(header(BASE + timedelta(days=draw(st.integers(-6, 10)))))
        lines += draw(st.lists(_LINE, max_size=4))
    return "\n".join(lines)


def dated_times(text: str) -> list[tuple[str | None, int] | None]:
    """Per line: a top-level observation's (its group's Date line, minutes), else None."""
    out: list[tuple[str | None, int] | None] = []
    day: str | None = None
    for line in text.split("\n"):
        day = line if line.startswith("Date: ") else day
        timed = _TIMED.match(line)
        out.append((day, int(timed[1]) * 60 + int(timed[2])) if timed else None)
    return out


def spans(messages: MessageTimes) -> dict[str, tuple[int, int]]:
    by_day: dict[str, list[int]] = {}
    for day, t in messages.times:
        by_day.setdefault(header(day), []).append(t.hour * 60 + t.minute)
    return {day: (min(ts), max(ts)) for day, ts in by_day.items()}


@settings(max_examples=300, deadline=None)
@given(messages(), observations())
def test_after_the_rule_every_time_lies_in_its_dates_span_or_its_date_is_named(times, text):
    out = check_times(text, times)
    span = spans(times)
    named = mentioned_dates(times.texts)
    for item in dated_times(out.text):
        if item is None:
            continue
        day, minutes = item
        if day is None:
            assert any(lo <= minutes <= hi for lo, hi in span.values())
        elif day in span:
            assert span[day][0] <= minutes <= span[day][1]
        else:  # kept only because the messages name it
            parsed = datetime.strptime(day, "Date: %b %d, %Y").date()
            assert (parsed.month, parsed.day, parsed.year) in named or (parsed.month, parsed.day, None) in named


@settings(max_examples=300, deadline=None)
@given(messages(), observations())
def test_the_rule_is_idempotent_and_counts_the_lines_it_changed(times, text):
    out = check_times(text, times)
    again = check_times(out.text, times)
    assert again.text is out.text and again.count == 0
    before, after = dated_times(text), dated_times(out.text)
    assert len(before) == len(after)  # no line is added or removed
    assert out.count == sum(b != a for b, a in zip(before, after))
    assert [line for line in text.split("\n") if not _TIMED.match(line) and not line.startswith("Date: ")] == \
        [line for line in out.text.split("\n") if not _TIMED.match(line) and not line.startswith("Date: ")]


@settings(max_examples=200, deadline=None)
@given(messages(), st.data())
def test_a_text_within_its_messages_comes_back_as_the_same_string(times, data):
    span = spans(times)
    lines: list[str] = []
    for day in data.draw(st.lists(st.sampled_from(sorted(span)), min_size=1, max_size=3)):
        lo, hi = span[day]
        lines.append(day)
        lines += [f"* 🟡 ({_clock(m)}) fact" for m in data.draw(st.lists(st.integers(lo, hi), max_size=4))]
    text = "\n".join(lines)
    out = check_times(text, times)
    assert out.text is text and out.count == 0


@settings(max_examples=200, deadline=None)
@given(messages(), st.integers(-6, 10), st.lists(st.integers(0, 1439), max_size=4))
def test_a_date_the_messages_name_is_kept(times, offset, minutes):
    day = BASE + timedelta(days=offset)
    named = MessageTimes(times.times, (*times.texts, f"on {MONTHS[day.month - 1]} {day.day}, {day.year}"))
    text = "\n".join([header(day), *(f"* 🔴 ({_clock(m)}) fact" for m in minutes)])
    out = check_times(text, named)
    if day in {d for d, _ in times.times}:  # a message date: held to its span instead
        assert out.text.split("\n")[0] == header(day)
    else:
        assert out.text is text and out.count == 0
