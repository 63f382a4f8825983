"""Dates in the observation log, annotated relative to "now" for the actor (spec §10).

The observer writes absolute dates: `Date: May 15, 2023` group headers and, at the end of a line,
`(meaning May 30, 2023)` / `(estimated late April 2023)` notes.  Before the log is shown to the
agent these are read against the current time:

    Date: May 15, 2023 (3 weeks ago)
    * 🔴 (14:30) User will fly to Lisbon (meaning May 30, 2023 - 1 week ago, likely already happened)

    [1 month later]

    Date: Jun 20, 2023 (today)

Pure functions: "now" is always an argument (the thread's newest event time, never the wall
clock), and the calendar dates the observer wrote are read in `zone` (the configured time zone
the transcript was rendered in; UTC by default).  The stored text is never changed by these.

Dates are read as JavaScript's `new Date("May 30, 2023")` reads them in the original: a month word
is recognised by its first three letters (`Sept`, `December`), days 1-31 are accepted and roll
over like JavaScript's (`Feb 30` is `Mar 2`), and the result is midnight of that day.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo

__all__ = [
    "add_relative_time_to_observations",
    "expand_inline_estimated_dates",
    "format_gap_between_dates",
    "format_relative_time",
    "is_future_intent_observation",
    "parse_date_from_content",
    "parse_month_day_year",
]

_DAY = timedelta(days=1)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _whole_days(later: datetime, earlier: datetime) -> int:
    """`Math.floor((later - earlier) / 86 400 000)`: whole days, rounded towards the past."""
    return (_aware(later) - _aware(earlier)) // _DAY


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def format_relative_time(date: datetime, now: datetime) -> str:
    """`date` as seen from `now`: `today`, `yesterday`, `3 days ago`, `1 week ago`, `in 2 years`...

    Days are whole days between the two instants, floored (so a date later today, or a few
    hours into tomorrow, is `tomorrow`, as in the original).
    """
    days = _whole_days(now, date)
    if days < 0:
        ahead = -days
        if ahead == 1:
            return "tomorrow"
        if ahead < 7:
            return f"in {ahead} days"
        if ahead < 14:
            return "in 1 week"
        if ahead < 30:
            return f"in {ahead // 7} weeks"
        if ahead < 60:
            return "in 1 month"
        if ahead < 365:
            return f"in {ahead // 30} months"
        return f"in {_plural(ahead // 365, 'year')}"
    if days == 0:
        return "today"
    if days == 1:
        return "yesterday"
    if days < 7:
        return f"{days} days ago"
    if days < 14:
        return "1 week ago"
    if days < 30:
        return f"{days // 7} weeks ago"
    if days < 60:
        return "1 month ago"
    if days < 365:
        return f"{days // 30} months ago"
    return f"{_plural(days // 365, 'year')} ago"


def format_gap_between_dates(previous: datetime, current: datetime) -> str | None:
    """The marker between two date groups, e.g. `[3 weeks later]`; None for one day or less
    (or when the groups go backwards)."""
    days = _whole_days(current, previous)
    if days <= 1:
        return None
    if days < 7:
        return f"[{days} days later]"
    if days < 14:
        return "[1 week later]"
    if days < 30:
        return f"[{days // 7} weeks later]"
    if days < 60:
        return "[1 month later]"
    return f"[{days // 30} months later]"


def parse_month_day_year(month: str, day: int | str, year: int | str,
                         zone: tzinfo = UTC) -> datetime | None:
    """Midnight (in `zone`) of `<month> <day>, <year>` as JavaScript's Date reads it; None if it
    is not a date (unknown month word, day outside 1-31, year 0)."""
    word = month.strip().lower()
    if len(word) < 3 or word[:3] not in _MONTHS:
        return None
    day, year = int(day), int(year)
    if not 1 <= day <= 31 or not 1 <= year <= 9999:
        return None
    first = datetime(year, _MONTHS.index(word[:3]) + 1, 1, tzinfo=zone)
    try:
        rolled = first + timedelta(days=day - 1)  # Feb 30 -> Mar 2, as in JavaScript
    except OverflowError:
        return None
    return rolled.replace(tzinfo=zone)


# The forms parse_date_from_content understands, tried in this order.
_SIMPLE = re.compile(r"([A-Z][a-z]+)\s+([0-9]{1,2}),?\s+([0-9]{4})")
_RANGE = re.compile(r"([A-Z][a-z]+)\s+([0-9]{1,2})-[0-9]{1,2},?\s+([0-9]{4})")
_VAGUE = re.compile(r"(late|early|mid)[- ]?(?:to[- ]?(?:late|early|mid)[- ]?)?([A-Z][a-z]+)\s+([0-9]{4})",
                    re.IGNORECASE)
_CROSS_MONTH = re.compile(r"([A-Z][a-z]+)\s+to\s+(?:early\s+)?([A-Z][a-z]+)\s+([0-9]{4})", re.IGNORECASE)
_VAGUE_DAY = {"early": 7, "mid": 15, "late": 23}


def parse_date_from_content(content: str, zone: tzinfo = UTC) -> datetime | None:
    """The date a `(meaning …)` / `(estimated …)` note refers to, or None.

    `May 30, 2023` (comma optional); `May 27-28, 2023` -> the first day; `early|mid|late May 2023`
    -> the 7th / 15th / 23rd (`mid-to-late` takes the first word); `April to May 2023` -> the 1st
    of the second month.
    """
    for pattern in (_SIMPLE, _RANGE):
        match = pattern.search(content)
        if match:
            month, day, year = match.groups()
            if found := parse_month_day_year(month, day, year, zone=zone):
                return found
    match = _VAGUE.search(content)
    if match:
        modifier, month, year = match.groups()
        if found := parse_month_day_year(month, _VAGUE_DAY[modifier.lower()], year, zone=zone):
            return found
    match = _CROSS_MONTH.search(content)
    if match and (found := parse_month_day_year(match.group(2), 1, match.group(3), zone=zone)):
        return found
    return None


_FUTURE_INTENT = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"\bwill\s+(?:be\s+)?(?:\w+ing|\w+)\b",
    r"\bplans?\s+to\b",
    r"\bplanning\s+to\b",
    r"\blooking\s+forward\s+to\b",
    r"\bgoing\s+to\b",
    r"\bintends?\s+to\b",
    r"\bwants?\s+to\b",
    r"\bneeds?\s+to\b",
    r"\babout\s+to\b",
))


def is_future_intent_observation(line: str) -> bool:
    """Whether the line states something planned (`will`, `plans to`, `going to`, `needs to`…)."""
    return any(p.search(line) for p in _FUTURE_INTENT)


_INLINE_DATE = re.compile(r"\((estimated|meaning)\s+([^)]+[0-9]{4})\)", re.IGNORECASE)


def expand_inline_estimated_dates(observations: str, now: datetime, zone: tzinfo = UTC) -> str:
    """`(meaning May 30, 2023)` -> `(meaning May 30, 2023 - 3 weeks ago)`; when that date has
    passed and the line before the note states an intent, `(… - 3 weeks ago, likely already
    happened)`.  Notes whose date cannot be read stay as they are."""
    now = _aware(now)

    def expand(match: re.Match[str]) -> str:
        prefix, content = match.group(1), match.group(2)
        target = parse_date_from_content(content, zone)
        if target is None:
            return match.group(0)
        relative = format_relative_time(target, now)
        line_start = observations.rfind("\n", 0, match.start()) + 1
        if target < now and is_future_intent_observation(observations[line_start:match.start()]):
            return f"({prefix} {content} - {relative}, likely already happened)"
        return f"({prefix} {content} - {relative})"

    return _INLINE_DATE.sub(expand, observations)


_DATE_HEADER = re.compile(r"^(Date:\s*)([A-Z][a-z]+) ([0-9]{1,2}), ([0-9]{4})$", re.MULTILINE)


def add_relative_time_to_observations(observations: str, now: datetime, zone: tzinfo = UTC) -> str:
    """The log as the actor reads it at `now`.

    1. inline `(meaning|estimated …)` notes get their relative time (`expand_inline_estimated_dates`);
    2. every header line exactly `Date: <Month> <D>, <YYYY>` gets ` (<relative>)` appended;
    3. between consecutive headers more than a day apart, `\\n[<gap>]\\n\\n` is inserted before the
       later header (`[3 days later]`, `[1 week later]`, `[3 weeks later]`, `[2 months later]`).
    """
    text = expand_inline_estimated_dates(observations, now, zone)
    out: list[str] = []
    last_end = 0
    previous: datetime | None = None
    for match in _DATE_HEADER.finditer(text):
        label, month, day, year = match.groups()
        date = parse_month_day_year(month, day, year, zone)
        if date is None:
            continue
        out.append(text[last_end:match.start()])
        if previous is not None and (gap := format_gap_between_dates(previous, date)):
            out.append(f"\n{gap}\n\n")
        out.append(f"{label}{month} {day}, {year} ({format_relative_time(date, now)})")
        last_end = match.end()
        previous = date
    out.append(text[last_end:])
    return "".join(out)
