"""Date utils of the context window (spec §10, §15 item 11): every row of §10's tables."""

from __future__ import annotations

import ast
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from omstream.projections.views.dates import (
    add_relative_time_to_observations,
    expand_inline_estimated_dates,
    format_gap_between_dates,
    format_relative_time,
    is_future_intent_observation,
    parse_date_from_content,
    parse_month_day_year,
)

NOW = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)


def days(n: float, base: datetime = NOW) -> datetime:
    return base + timedelta(days=n)


# --- relative time ----------------------------------------------------------------------------
@pytest.mark.parametrize("offset, expected", [
    (0, "today"),
    (-1, "yesterday"),
    (-2, "2 days ago"), (-3, "3 days ago"), (-6, "6 days ago"),             # N days ago (< 7)
    (-7, "1 week ago"), (-13, "1 week ago"),                                  # 1 week ago (< 14)
    (-14, "2 weeks ago"), (-21, "3 weeks ago"), (-29, "4 weeks ago"),         # N weeks ago (< 30)
    (-30, "1 month ago"), (-59, "1 month ago"),                               # 1 month ago (< 60)
    (-60, "2 months ago"), (-90, "3 months ago"), (-180, "6 months ago"),     # floor(d/30) (< 365)
    (-364, "12 months ago"),
    (-365, "1 year ago"), (-729, "1 year ago"),                               # N year(s) ago
    (-730, "2 years ago"), (-1095, "3 years ago"),
])
def test_relative_time_in_the_past(offset, expected):
    assert format_relative_time(days(offset), NOW) == expected


@pytest.mark.parametrize("offset, expected", [
    (1, "tomorrow"),
    (2, "in 2 days"), (3, "in 3 days"), (6, "in 6 days"),
    (7, "in 1 week"), (13, "in 1 week"),
    (14, "in 2 weeks"), (21, "in 3 weeks"), (29, "in 4 weeks"),
    (30, "in 1 month"), (59, "in 1 month"),
    (60, "in 2 months"), (90, "in 3 months"), (364, "in 12 months"),
    (365, "in 1 year"), (729, "in 1 year"),
    (730, "in 2 years"), (1095, "in 3 years"),
])
def test_relative_time_in_the_future(offset, expected):
    assert format_relative_time(days(offset), NOW) == expected


def test_spec_quoted_relative_times():
    """§15 item 11: −13 d, −59 d, −180 d, +730 d."""
    assert format_relative_time(days(-13), NOW) == "1 week ago"
    assert format_relative_time(days(-59), NOW) == "1 month ago"
    assert format_relative_time(days(-180), NOW) == "6 months ago"
    assert format_relative_time(days(730), NOW) == "in 2 years"


def test_relative_time_counts_whole_days_floored_like_the_original():
    # a few hours earlier is still today; a few hours later is already "tomorrow" (floor of -0.25)
    assert format_relative_time(NOW - timedelta(hours=11), NOW) == "today"
    assert format_relative_time(NOW + timedelta(hours=6), NOW) == "tomorrow"
    assert format_relative_time(NOW - timedelta(hours=36), NOW) == "yesterday"


def test_relative_time_compares_instants_across_zones():
    tokyo_midnight = datetime(2025, 6, 16, 0, 0, tzinfo=ZoneInfo("Asia/Tokyo"))  # 15:00 UTC on the 15th
    assert format_relative_time(tokyo_midnight, NOW) == "tomorrow"
    assert format_relative_time(datetime(2025, 6, 15, 0, 0, tzinfo=UTC), NOW) == "today"


# --- gaps between date groups ------------------------------------------------------------------
@pytest.mark.parametrize("gap, expected", [
    (0, None), (1, None), (-5, None),                                          # consecutive or backwards
    (2, "[2 days later]"), (3, "[3 days later]"), (6, "[6 days later]"),
    (7, "[1 week later]"), (13, "[1 week later]"),
    (14, "[2 weeks later]"), (25, "[3 weeks later]"), (29, "[4 weeks later]"),
    (30, "[1 month later]"), (59, "[1 month later]"),
    (60, "[2 months later]"), (90, "[3 months later]"), (180, "[6 months later]"), (400, "[13 months later]"),
])
def test_gap_between_dates(gap, expected):
    base = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    assert format_gap_between_dates(base, days(gap, base)) == expected


def test_spec_quoted_gaps():
    """§15 item 11: 25 d → `[3 weeks later]`, 90 d → `[3 months later]`."""
    base = datetime(2025, 6, 1, tzinfo=UTC)
    assert format_gap_between_dates(base, days(25, base)) == "[3 weeks later]"
    assert format_gap_between_dates(base, days(90, base)) == "[3 months later]"


# --- parseDateFromContent ----------------------------------------------------------------------
@pytest.mark.parametrize("content, expected", [
    ("May 30, 2023", date(2023, 5, 30)),
    ("May 30 2023", date(2023, 5, 30)),                    # comma optional
    ("December 1, 2024", date(2024, 12, 1)),
    ("Sept 5, 2023", date(2023, 9, 5)),                    # month word read by its first three letters
    ("May 27-28, 2023", date(2023, 5, 27)),                # a range: its first day
    ("early May 2023", date(2023, 5, 7)),
    ("mid May 2023", date(2023, 5, 15)),
    ("late April 2023", date(2023, 4, 23)),                # §15 item 11: Apr 23
    ("mid-to-late May 2023", date(2023, 5, 15)),           # the first modifier decides
    ("Late June 2024", date(2024, 6, 23)),                 # the modifier is case-insensitive
    ("April to May 2023", date(2023, 5, 1)),               # across months: the 1st of the second
    ("late April to early May 2023", date(2023, 5, 7)),    # the vague form next to the year wins
    ("Feb 30, 2023", date(2023, 3, 2)),                    # rolls over like JavaScript's Date
])
def test_parse_date_from_content(content, expected):
    parsed = parse_date_from_content(content)
    assert parsed is not None and parsed.date() == expected
    assert (parsed.hour, parsed.minute, parsed.tzinfo) == (0, 0, UTC)


@pytest.mark.parametrize("content", ["sometime soon", "next week", "", "Foo 30, 2023", "May 32, 2023",
                                     "2023", "late May"])
def test_unreadable_content_is_none(content):
    assert parse_date_from_content(content) is None


def test_dates_are_midnight_in_the_given_zone():
    zone = ZoneInfo("America/New_York")
    parsed = parse_date_from_content("late April 2023", zone)
    assert parsed == datetime(2023, 4, 23, tzinfo=zone)
    assert parsed.astimezone(UTC) == datetime(2023, 4, 23, 4, tzinfo=UTC)
    assert parse_month_day_year("Mar", 3, 2025) == datetime(2025, 3, 3, tzinfo=UTC)
    assert parse_month_day_year("Ma", 3, 2025) is None


# --- future intent -----------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "User will attend the meeting", "She will be traveling next week",
    "User plans to visit Paris", "They plan to refactor the code", "User is planning to move",
    "Looking forward to the concert", "User is going to start a new project",
    "User intends to apply", "They intend to finish by Friday", "User wants to learn Rust",
    "They want to rest", "User needs to file taxes", "They need to call", "User is about to leave",
    "USER WILL ATTEND", "Plans To Visit",
])
def test_future_intent_is_detected(line):
    assert is_future_intent_observation(line)


@pytest.mark.parametrize("line", ["User completed the project", "Discussed options for lunch",
                                  "User prefers dark mode", "willing"])
def test_other_lines_have_no_future_intent(line):
    assert not is_future_intent_observation(line)


# --- inline (meaning|estimated …) notes --------------------------------------------------------
def test_spec_example_meaning_three_weeks_ago():
    now = datetime(2023, 6, 20, 12, 0, tzinfo=UTC)
    assert expand_inline_estimated_dates("* Moved flat (meaning May 30, 2023)", now) == \
        "* Moved flat (meaning May 30, 2023 - 3 weeks ago)"


def test_past_planned_action_on_a_will_line_likely_already_happened():
    """§15 item 11: `(estimated May 30, 2023)` on a "will" line."""
    out = expand_inline_estimated_dates("User will attend the conference (estimated May 30, 2023)", NOW)
    assert out == "User will attend the conference (estimated May 30, 2023 - 2 years ago, likely already happened)"


def test_past_date_without_intent_only_gets_its_relative_time():
    out = expand_inline_estimated_dates("User bought tickets (estimated May 30, 2023)", NOW)
    assert out == "User bought tickets (estimated May 30, 2023 - 2 years ago)"


def test_future_date_on_a_will_line_has_not_happened_yet():
    out = expand_inline_estimated_dates("Event will start (estimated July 15, 2025)", NOW)
    assert out == "Event will start (estimated July 15, 2025 - in 1 month)"


def test_each_note_reads_the_intent_of_its_own_line():
    text = "Bought tickets for event (estimated May 30, 2023)\nUser plans to attend event (estimated May 30, 2023)"
    first, second = expand_inline_estimated_dates(text, NOW).split("\n")
    assert first == "Bought tickets for event (estimated May 30, 2023 - 2 years ago)"
    assert second == "User plans to attend event (estimated May 30, 2023 - 2 years ago, likely already happened)"


def test_intent_after_the_note_does_not_count():
    out = expand_inline_estimated_dates("Booked (meaning May 30, 2023) and will pay later", NOW)
    assert out == "Booked (meaning May 30, 2023 - 2 years ago) and will pay later"


@pytest.mark.parametrize("content, expected", [
    ("(meaning May 27-28, 2023)", "(meaning May 27-28, 2023 - 2 years ago)"),
    ("(estimated late May 2025)", "(estimated late May 2025 - 3 weeks ago)"),
    ("(Estimated early June 2025)", "(Estimated early June 2025 - 1 week ago)"),  # prefix kept as written
    ("(estimated April to May 2025)", "(estimated April to May 2025 - 1 month ago)"),
    ("(estimated sometime soon)", "(estimated sometime soon)"),
    ("(meaning the summer of 2023)", "(meaning the summer of 2023)"),
])
def test_inline_forms(content, expected):
    assert expand_inline_estimated_dates(content, NOW) == expected


# --- the whole transform ------------------------------------------------------------------------
def test_headers_get_relative_time_and_gaps_are_marked():
    text = "\n".join([
        "Date: May 1, 2025", "* 🔴 (09:00) User will move to Lisbon (meaning May 20, 2025)", "",
        "Date: May 26, 2025", "* 🔴 (10:00) Moved", "",
        "Date: May 27, 2025", "* (11:00) Unpacked", "",
        "Date: Aug 25, 2025", "* (12:00) Trip planned",
    ])
    assert add_relative_time_to_observations(text, NOW) == "\n".join([
        "Date: May 1, 2025 (1 month ago)",
        "* 🔴 (09:00) User will move to Lisbon (meaning May 20, 2025 - 3 weeks ago, likely already happened)",
        "", "", "[3 weeks later]", "",                          # 25 days
        "Date: May 26, 2025 (2 weeks ago)", "* 🔴 (10:00) Moved", "",
        "Date: May 27, 2025 (2 weeks ago)", "* (11:00) Unpacked", "",   # consecutive days: no marker
        "", "[3 months later]", "",                             # 90 days
        "Date: Aug 25, 2025 (in 2 months)", "* (12:00) Trip planned",
    ])


def test_spec_header_example():
    out = add_relative_time_to_observations("Date: June 10, 2025\n- User said hello", NOW)
    assert out == "Date: June 10, 2025 (5 days ago)\n- User said hello"


def test_only_exact_header_lines_are_annotated():
    text = "Date: June 10, 2025 was busy\n  Date: June 10, 2025\nDate: 2025-06-10\nDate: Foo 10, 2025"
    assert add_relative_time_to_observations(text, NOW) == text


def test_unreadable_headers_do_not_break_the_gap_chain():
    text = "Date: June 1, 2025\nDate: Foo 3, 2025\nDate: June 10, 2025"
    assert add_relative_time_to_observations(text, NOW) == (
        "Date: June 1, 2025 (2 weeks ago)\nDate: Foo 3, 2025\n\n[1 week later]\n\nDate: June 10, 2025 (5 days ago)")


def test_without_headers_only_inline_notes_change():
    assert add_relative_time_to_observations("* will go (meaning June 1, 2025)", NOW) == \
        "* will go (meaning June 1, 2025 - 2 weeks ago, likely already happened)"
    assert add_relative_time_to_observations("plain text", NOW) == "plain text"


def test_header_dates_are_read_in_the_configured_zone():
    # 23:30 on June 14 in Los Angeles is 06:30 UTC on the 15th: "Date: June 14" is still today there.
    now = datetime(2025, 6, 15, 6, 30, tzinfo=UTC)
    assert add_relative_time_to_observations("Date: June 14, 2025", now, ZoneInfo("America/Los_Angeles")) \
        == "Date: June 14, 2025 (today)"
    assert add_relative_time_to_observations("Date: June 14, 2025", now) == "Date: June 14, 2025 (yesterday)"


def test_the_module_has_no_clock():
    source = Path(__file__).resolve().parents[3] / "projections" / "views" / "dates.py"
    tree = ast.parse(source.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "time" not in imported
    calls = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not calls & {"now", "utcnow", "today", "time"}
