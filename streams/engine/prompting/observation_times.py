"""Observations checked against their messages: an Observer's dates and times are held to the
messages it read (issue 40, item 2).

A small model invents times (the demo's observations said 18:35–18:50 for messages of
18:00–18:06) and, less often, dates.  An observation's `Date:` line and `(HH:MM)` must come from
the messages it was made from, so the rule below corrects what does not; it is pure, knows no
model, and is applied to every Observer answer (blocking, buffered, thread and resource scope)
before it is committed — never to a Reflector's, whose old observations have no messages left.

The messages are seen as the Observer's transcript shows them (`transcript.render_transcript`):
each message with a time of its own (not a temporal-gap `Signal`) gives a (date, HH:MM) pair in
the configured time zone, to the minute.  For an observation text, group by group:

1. **Dates.**  A `Date: Mon D, YYYY` group whose date is a date of the messages stays.  One whose
   date is not is kept when the messages' text names that date explicitly ("May 2", "2 May
   2026", "May 2nd, 2026", "2026-05-02", "05/02/2026" read either way; a mention without a year
   matches any year) — the observation then refers to that day and its times are left alone.
   Otherwise the group's `Date:` line is moved to the nearest message date (the earlier of two
   equally near), and every observation line of the group counts as corrected.
2. **Times.**  A top-level observation line (`* 🔴 (HH:MM) ...`, unindented) of a group dated
   with a message date keeps its time when it lies within the span [first, last] of that date's
   message times; outside it (or not a clock time, e.g. `(25:00)`) its time becomes the nearest
   message time of that date, i.e. the first or the last, and the line counts as corrected.
   A line before any `Date:` line has no date: its time is kept when it lies within the span of
   some message date, else it becomes the nearest message time of any date.
3. Sub-bullets (indented `* -> ...`, `* ✅ ...`) have no time of their own and are untouched;
   so are prose lines and lines without a time.
4. **Relative dates** in an observation's text ("last week", "yesterday", "next Friday") are left
   as they are: the rule reads only the `Date:` line and the `(HH:MM)`.  Nothing here anchors a
   relative phrase; the Observer is told how much time passed by the temporal-gap markers
   (`temporal`), and the agent's context annotates dates relative to its "now"
   (`omstream.projections.views.dates`).
5. **Resource scope.**  `check_sections` checks each `<thread id="…">` section against that
   thread's messages (text outside sections, or a section of a thread not given, is untouched);
   the fold checks each thread's parsed answer against its own messages (`multi_observing`).
6. Without any message time (nothing timestamped) a text is returned unchanged.

The count is the number of top-level observation lines whose (date, time) changed.  A text that
already keeps to its messages comes back as the very same string, and the rule is idempotent.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, time
from zoneinfo import ZoneInfo

from ..state import PendingMessage
from .transcript import MONTHS, SIGNAL

__all__ = ["Corrected", "MessageTimes", "check_messages", "check_sections", "check_times", "mentioned_dates",
           "message_times"]

_DATE_LINE = re.compile(r"^Date: (?P<mon>[A-Z][a-z]{2}) (?P<day>\d{1,2}), (?P<year>\d{4})\s*$")
# A top-level observation: "* <priority> (HH:MM) ..." at column 0 (the parser writes them so).
_TIMED_LINE = re.compile(r"^\* (?:\S+ )?\((?P<h>\d{2}):(?P<m>\d{2})\)")
_SECTION = re.compile(r'<thread id="(?P<id>[^"]*)">\n(?P<body>.*?)</thread>', re.DOTALL)

# Mentions of a date in the messages' text, in the forms people and tools write.
_MONTH_NAME = (r"(?P<mon>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
               r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?")
_ORDINAL = r"(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(?P<year>\d{4})(?!\d))?"
_MENTIONS = (
    re.compile(rf"\b{_MONTH_NAME}\s+(?P<day>\d{{1,2}}){_ORDINAL}(?!\d){_YEAR}", re.IGNORECASE),
    re.compile(rf"\b(?P<day>\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?{_MONTH_NAME}(?![a-z]){_YEAR}", re.IGNORECASE),
)
_ISO_DATE = re.compile(r"(?<!\d)(?P<year>\d{4})-(?P<m>\d{1,2})-(?P<day>\d{1,2})(?!\d)")
_NUMERIC_DATE = re.compile(r"(?<![\d/.])(?P<a>\d{1,2})[/.](?P<b>\d{1,2})[/.](?P<year>\d{4})(?!\d)")

#: A date a message names: (month, day, year or None when the mention has none).
Mention = tuple[int, int, int | None]


@dataclass(frozen=True, slots=True)
class Corrected:
    """The checked observation text and how many observation lines it corrected."""

    text: str
    count: int = 0


@dataclass(frozen=True, slots=True)
class MessageTimes:
    """What the rule knows of the messages an observation was made from."""

    times: tuple[tuple[date, time], ...]
    """Each timed message's (date, time) as the Observer's transcript shows it."""
    texts: tuple[str, ...] = ()
    """The messages' text, searched for dates they name (only when a group needs it)."""


# --- the messages -------------------------------------------------------------------------------
def message_times(messages: Iterable[PendingMessage], time_zone: str) -> MessageTimes:
    """The messages as the transcript renders them: a message's time in `time_zone`, to the
    minute, unless all its lines are signals (a signal line shows no time of its own)."""
    zone = ZoneInfo(time_zone)
    times: list[tuple[date, time]] = []
    texts: list[str] = []
    for message in messages:
        title = message.role.capitalize() if message.title is None else message.title
        lines = message.lines if message.lines is not None else ((title, message.text),)
        texts += [message.text, *(body for _, body in (message.lines or ()))]
        if any(title != SIGNAL for title, _ in lines):
            local = message.created_at.astimezone(zone)
            times.append((local.date(), time(local.hour, local.minute)))
    return MessageTimes(tuple(times), tuple(texts))


def mentioned_dates(texts: Iterable[str]) -> frozenset[Mention]:
    """Every date the texts name explicitly, in any common written form."""
    found: set[Mention] = set()
    for text in texts:
        for form in _MENTIONS:
            for m in form.finditer(text):
                month = MONTHS.index(m["mon"][:3].capitalize()) + 1
                _add(found, month, int(m["day"]), int(m["year"]) if m["year"] else None)
        for m in _ISO_DATE.finditer(text):
            _add(found, int(m["m"]), int(m["day"]), int(m["year"]))
        for m in _NUMERIC_DATE.finditer(text):  # 05/02/2026: May 2 or 5 February, both kept
            a, b, year = int(m["a"]), int(m["b"]), int(m["year"])
            _add(found, a, b, year)
            _add(found, b, a, year)
    return frozenset(found)


def _add(found: set[Mention], month: int, day: int, year: int | None) -> None:
    if 1 <= month <= 12 and 1 <= day <= 31:
        found.add((month, day, year))


# --- one observation text -----------------------------------------------------------------------
def _minutes(t: time) -> int:
    return t.hour * 60 + t.minute


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _date_line(day: date) -> str:
    return f"Date: {MONTHS[day.month - 1]} {day.day}, {day.year}"


def _written_date(match: re.Match[str]) -> tuple[date | None, date]:
    """The date a `Date:` line names (None when it is no real date, e.g. Feb 30), and the day
    it is nearest to (the month's last day for a day past it), to measure distances with."""
    month = MONTHS.index(match["mon"]) + 1 if match["mon"] in MONTHS else 1
    year, day = max(1, int(match["year"])), max(1, int(match["day"]))
    near = date(year, month, min(day, calendar.monthrange(year, month)[1]))
    exact = near if near.day == day and match["mon"] in MONTHS and int(match["year"]) >= 1 else None
    return exact, near


def _nearest(value: int, candidates: Sequence[int]) -> int:
    """The candidate nearest to `value`, the smaller of two equally near."""
    return min(candidates, key=lambda c: (abs(c - value), c))


class _Rule:
    """The rule's answers for one set of messages: each date's message times, the dates named."""

    def __init__(self, messages: MessageTimes) -> None:
        self.by_date: dict[date, list[int]] = {}
        for day, t in messages.times:
            self.by_date.setdefault(day, []).append(_minutes(t))
        self._texts = messages.texts
        self._mentions: frozenset[Mention] | None = None  # searched only when a date needs it

    def named(self, day: date) -> bool:
        if self._mentions is None:
            self._mentions = mentioned_dates(self._texts)
        return (day.month, day.day, day.year) in self._mentions or (day.month, day.day, None) in self._mentions

    def group_date(self, written: tuple[date | None, date]) -> tuple[date | None, bool]:
        """The date a group keeps or moves to (None: a named date, its times left alone), and
        whether it moved."""
        exact, near = written
        if exact is not None and exact in self.by_date:
            return exact, False
        if exact is not None and self.named(exact):
            return None, False
        days = sorted(self.by_date)
        return min(days, key=lambda d: abs((d - near).days)), True

    def time_on(self, day: date | None, minutes: int, valid: bool) -> int:
        """The time a line of a group dated `day` (None: undated) keeps or gets."""
        spans = [self.by_date[day]] if day is not None else list(self.by_date.values())
        if valid and any(min(times) <= minutes <= max(times) for times in spans):
            return minutes
        return _nearest(minutes, sorted({t for times in spans for t in times}))


def check_times(text: str, messages: MessageTimes) -> Corrected:
    """`text` (one thread's parsed observations) held to `messages`; see the module's rule."""
    if not messages.times or not text:
        return Corrected(text)
    rule = _Rule(messages)
    lines = text.split("\n")
    day: date | None = None  # the date the current group's times are checked on
    checked = True  # False in a group dated with a named date: its times are left alone
    moved = changed = False
    count = 0
    for i, line in enumerate(lines):
        header = _DATE_LINE.match(line)
        if header is not None:
            target, moved = rule.group_date(_written_date(header))
            checked, day = target is not None, target
            if moved and target is not None:
                lines[i], changed = _date_line(target), True
            continue
        timed = _TIMED_LINE.match(line)
        if timed is None or not checked:
            continue
        hours, minutes = int(timed["h"]), int(timed["m"])
        written = hours * 60 + minutes
        new = rule.time_on(day, written, hours < 24 and minutes < 60)
        if new != written:
            lines[i], changed = f"{line[:timed.start('h')]}{_clock(new)}{line[timed.end('m'):]}", True
        count += moved or new != written
    return Corrected("\n".join(lines), count) if changed else Corrected(text)


def check_sections(text: str, threads: Mapping[str, MessageTimes]) -> Corrected:
    """A resource memory's text: each `<thread id="…">` section held to that thread's messages
    (by the id the section shows); the rest of the text is left as it is."""
    out: list[str] = []
    at = count = 0
    for section in _SECTION.finditer(text):
        messages = threads.get(section["id"])
        if messages is None:
            continue
        checked = check_times(section["body"], messages)
        out += [text[at:section.start("body")], checked.text]
        at, count = section.end("body"), count + checked.count
    if not out:
        return Corrected(text)
    joined = "".join([*out, text[at:]])
    return Corrected(joined, count) if joined != text else Corrected(text)


def check_messages(text: str, messages: Iterable[PendingMessage], time_zone: str) -> Corrected:
    """`check_times` against the messages an observation was made from, as the engine calls it."""
    return check_times(text, message_times(messages, time_zone))
