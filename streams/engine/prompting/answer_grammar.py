"""Grammars (GBNF) for the Observer's and the Reflector's answers, for a model that decodes
under one: `local/<name>`, llama.cpp's server, which takes a `grammar` per request.

A small model drifts from the answer's contract (`parsing`): prose around the list, times as
`6:05 PM`, bullets without a priority, invented times, loops until `max_tokens`.  The lenient
parser repairs what it can; a grammar makes the drift impossible instead, so the answer is one
the parser reads as *clean*:

- the `<observations>` block holds `Date: Mon D, YYYY` lines, each followed by observation
  lines `* <🔴|🟡|🟢|✅> (HH:MM) text` with optional sub-bullets `  * -> text` / `  * ✅ text`
  (`parsing._CLEAN_*`);
- an Observer's dates are the dates of the messages it observes and each date's times are that
  date's message times, as the transcript shows them (already in the configured time zone):
  a time the messages do not have cannot be written;
- the number of lines and the length of a line are bounded, so a loop ends at the bound with a
  closed block rather than running to `max_tokens` and leaving it open;
- after the block only the sections the prompt asks for: the continuation hints and the inline
  extractors' `<slug>` sections (in resource scope, per-thread title and hints inside each
  `<thread id>` section, with only the batch's ids);
- a Reflector may also write short paragraph lines and blank lines between its dated lines
  (the condensing levels ask for paragraphs); the parser keeps those without a repair.

No text of an observation may hold `<`: a tag inside a line (`</observations>`, `<thread id>`)
would cut the block or a section where the readers look for tags.

What the grammar cannot rule out is content: a line that repeats an earlier one or copies the
prompt's example is still dropped by the parser (and counted as a repair).

The request's own text says what the prompt asked for (`request_grammar`), so the grammar
follows the prompt whatever built it: the transcript's date headers and time labels, the
thread blocks, the hint and extractor sections of the system prompt.  Everything here is pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .transcript import DATE_HEADER, MONTHS, clock24

__all__ = [
    "MAX_OBSERVATION_LINES",
    "observer_grammar",
    "reflector_grammar",
    "request_grammar",
    "resource_observer_grammar",
    "transcript_times",
]

#: Observation lines an Observer answer may hold in all (sub-bullets aside): the prompt asks for
#: 2 to 8 a batch; the bound only stops a loop.
MAX_OBSERVATION_LINES = 40
MAX_SUB_BULLETS = 4        # per observation line
MAX_TEXT_CHARS = 240       # per line of text
MAX_HINT_LINES = 3
MAX_SECTION_LINES = 40     # an extractor's section (a working-memory document is several lines)
MAX_REFLECTION_GROUPS = 80  # date groups of a reflection (a level may keep several per day)
MAX_REFLECTION_BLOCKS = 120  # observation lines of one date group of a reflection
MAX_FILLER_LINES = 4       # paragraph and blank lines before a reflection's observation line


# What the prompts write (`prompts`, `transcript`, `extraction`); pinned by the tests, which
# build grammars from the engine's real requests.
_HISTORY = "## New Message History to Observe\n\n"
_TASK = "\n\n---\n\n## Your Task"
_LOG = "## OBSERVATIONS TO REFLECT ON\n\n"
_LOG_END = "\n\n---\n\nWrite a refined"
_CUSTOM = "=== CUSTOM INSTRUCTIONS ==="
_EXTRA = "=== EXTRA SECTIONS ==="
_CLOCK = re.compile(r"^[^:\n]*?\((\d{1,2}):(\d{2}) ([AP])M\): ")
_THREAD_OPEN = re.compile(r'^<thread id="([^"\n]*)">$')
_LOG_DATE = re.compile(r"^Date: ((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{1,2}, \d{4})$",
                       re.MULTILINE)
_LOG_THREAD = re.compile(r'^<thread id="([^"\n]*)">$', re.MULTILINE)
_SLUG_LINE = re.compile(r"^<([a-z][a-z0-9-]*)>$", re.MULTILINE)

Dates = Mapping[str, Sequence[str]]
"""Date ("Mar 9, 2024") → the times ("21:15") its observations may have, in order."""


# --- GBNF text ---------------------------------------------------------------------------------
def _literal(text: str) -> str:
    """`text` as a GBNF string literal (thread ids are user data: anything may need escaping)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return f'"{"".join(out)}"'


def _choice(options: Sequence[str]) -> str:
    return "(" + " | ".join(_literal(o) for o in options) + ")"


def _repeat(item: str, low: int, high: int) -> str:
    return f"{item}{{{low},{high}}}" if high > low else f"{item}{{{low}}}"


# Rules every grammar shares.  A text starts with a visible character (`parsing._CLEAN_LINE`
# wants `\S` after the time: every character Python counts as a space is left out), holds no
# control character and never `<` (see the module's docstring).  A sub-bullet's text does not
# start with a digit, so the parser never takes it for a time.
_SPACES = "\\x00-\\x20\\x7f\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
_COMMON = {
    "priority": '"🔴" | "🟡" | "🟢" | "✅"',
    "char": "[^\\x00-\\x1f\\x7f<]",
    "text": f"[^{_SPACES}<] char{{0,{MAX_TEXT_CHARS - 1}}}",
    "sub": f'"  * " ("-> " | "✅ ") [^{_SPACES}<0-9] char{{0,{MAX_TEXT_CHARS - 1}}} "\\n"',
    "hint-body": f'text ("\\n" text){{0,{MAX_HINT_LINES - 1}}}',
    # A line of its own: llama.cpp refuses a repeated group whose rules, counted with the
    # repetitions inside it, times the repetition exceed 2000 (`("\n" char{0,240}){0,39}` would).
    "section-line": f"char{{0,{MAX_TEXT_CHARS}}}",
    "section-body": f'text ("\\n" section-line){{0,{MAX_SECTION_LINES - 1}}}',
}


class _Grammar:
    """Rules in the order they are added, `root` first."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {"root": ""}

    def add(self, name: str, body: str) -> str:
        self.rules[name] = body
        return name

    def render(self, *parts: str) -> str:
        self.rules["root"] = " ".join(p for p in parts if p)
        rules = {**self.rules, **_COMMON}  # a rule nothing uses is allowed in GBNF
        return "\n".join(f"{name} ::= {body}" for name, body in rules.items()) + "\n"

    def ordered_subset(self, prefix: str, items: Sequence[str]) -> str:
        """A rule matching one or more of `items` (rule names), each at most once, in order."""
        for i in reversed(range(len(items))):
            after = f"{prefix}-{i + 1}"
            self.add(f"{prefix}-{i}", items[i] if i == len(items) - 1 else f"{items[i]} {after}? | {after}")
        return f"{prefix}-0"

    def date_groups(self, prefix: str, dates: Dates, per_group: int) -> str:
        """One group per date, in order, each at most once: its `Date:` line and 1 to
        `per_group` observation lines at that date's times."""
        groups = []
        for i, (date, times) in enumerate(dates.items()):
            time = self.add(f"{prefix}-time-{i}", _choice(sorted(set(times))))
            entry = self.add(f"{prefix}-entry-{i}",
                             f'"* " priority " (" {time} ") " text "\\n" {_repeat("sub", 0, MAX_SUB_BULLETS)}')
            groups.append(self.add(f"{prefix}-group-{i}",
                                   f'{_literal(f"Date: {date}")} "\\n" {_repeat(entry, 1, per_group)}'))
        return self.ordered_subset(f"{prefix}-dates", groups)

    def sections(self, slugs: Sequence[str], *, before: str = "\n", after: str = "",
                 body: str = "section-body", prefix: str = "section") -> str:
        """Each of `slugs` as an optional `<slug>` section, in order ("" when none)."""
        parts = []
        for slug in dict.fromkeys(slugs):
            opening, closing = _literal(f"{before}<{slug}>\n"), _literal(f"\n</{slug}>{after}")
            parts.append(self.add(f"{prefix}-{slug}", f"{opening} {body} {closing}") + "?")
        return " ".join(parts)


def _usable(dates: Dates) -> dict[str, tuple[str, ...]]:
    return {date: tuple(times) for date, times in dates.items() if times}


def _per_group(groups: int, max_lines: int) -> int:
    return max(2, max_lines // max(1, groups))


# --- the grammars --------------------------------------------------------------------------------
def observer_grammar(dates: Dates, *, hints: bool, sections: Sequence[str] = (),
                     max_lines: int = MAX_OBSERVATION_LINES) -> str:
    """A single-thread Observer's answer: the block with the `dates` (and their times) only,
    then `<current-task>` / `<suggested-response>` when `hints`, then each of `sections`."""
    dates = _usable(dates)
    if not dates:
        raise ValueError("an observer grammar needs at least one date with a time")
    g = _Grammar()
    groups = g.date_groups("obs", dates, _per_group(len(dates), max_lines))
    hint_sections = g.sections(("current-task", "suggested-response"), body="hint-body", prefix="hint") if hints else ""
    return g.render('"<observations>\\n"', groups, '"</observations>"', hint_sections, g.sections(sections))


def resource_observer_grammar(threads: Mapping[str, Dates], *, hints: bool, title: bool,
                              sections: Sequence[str] = (), max_lines: int = MAX_OBSERVATION_LINES) -> str:
    """A multi-thread Observer's answer: inside the block one `<thread id>` section per thread of
    `threads` (shown id → its dates), each at most once and in order, holding its dates, then
    its `<thread-title>` when `title` and its hints when `hints`; after the block, `sections`."""
    threads = {shown: usable for shown, dates in threads.items() if (usable := _usable(dates))}
    if not threads:
        raise ValueError("a multi-thread observer grammar needs a thread with a dated message")
    g = _Grammar()
    per_group = _per_group(sum(len(d) for d in threads.values()), max_lines)
    inner = g.sections((*(["thread-title"] if title else []),
                        *(["current-task", "suggested-response"] if hints else [])),
                       before="", after="\n", body="hint-body", prefix="thread-hint")
    items = []
    for i, (shown, dates) in enumerate(threads.items()):
        opening = _literal(f'<thread id="{shown}">\n')
        groups = g.date_groups(f"t{i}", dates, per_group)
        items.append(g.add(f"thread-{i}", " ".join(p for p in (opening, groups, inner, '"</thread>\\n"') if p)))
    body = g.ordered_subset("threads", items)
    return g.render('"<observations>\\n"', body, '"</observations>"', g.sections(sections))


def reflector_grammar(*, hints: bool, sections: Sequence[str] = (), dates: Sequence[str] = (),
                      thread_ids: Sequence[str] = ()) -> str:
    """A Reflector's answer: date groups (of `dates` when given, else any date) of observation
    lines at any time, sub-bullets, paragraph and blank lines; with `thread_ids`, also
    `<thread id>` sections of those ids after the lines that hold for every thread; then
    `<suggested-response>` when `hints`, then `sections`."""
    g = _Grammar()
    if dates:
        date = g.add("r-date", _choice(list(dict.fromkeys(dates))))
    else:
        g.add("r-month", _choice(MONTHS))
        date = g.add("r-date", 'r-month " " ([1-9] | [12] [0-9] | "3" [01]) ", " [12] [0-9] [0-9] [0-9]')
    g.add("r-time", '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]')
    g.add("r-line", '"* " priority " (" r-time ") " text "\\n"')
    g.add("r-entry", "r-line | sub")
    # A paragraph line: a capitalised word, a space, a lower-case word.  That keeps it from
    # looking like a list line, a date, a heading or an echoed transcript line ("User (6:00
    # PM): ...", "Tool Call search: ..."), which the parser would drop or repair: the first word
    # is never "Tool".
    g.add("r-word", '[A-SU-Z] [a-z]{0,15} | "T" ([a-np-z] [a-z]{0,14})? | "To" ([a-np-z] [a-z]{0,13})? '
                    '| "Too" ([a-km-z] [a-z]{0,12})? | "Tool" [a-z]{1,12}')
    g.add("r-para", f'r-word " " [a-z] char{{0,{MAX_TEXT_CHARS}}} "\\n"')
    g.add("r-block", f'("\\n" | r-para){{0,{MAX_FILLER_LINES}}} r-entry')
    # A group starts with an observation line (a group of sub-bullets alone would leave the parser
    # nothing) and ends with one: paragraph lines after the last would be chatter to the parser.
    g.add("r-group", f'"\\n"? "Date: " {date} "\\n" ("\\n" | r-para){{0,{MAX_FILLER_LINES}}} r-line '
                     f'{_repeat("r-block", 0, MAX_REFLECTION_BLOCKS)}')
    groups = _repeat("r-group", 1, MAX_REFLECTION_GROUPS)
    body = groups
    if thread_ids:
        thread = g.add("r-thread-id", _choice(list(dict.fromkeys(thread_ids))))
        g.add("r-section", f'"<thread id=\\"" {thread} "\\">\\n" {groups} "</thread>\\n"')
        sections_of_threads = _repeat("r-section", 1, 2 * len(set(thread_ids)))
        body = f"({groups} {_repeat('r-section', 0, 2 * len(set(thread_ids)))} | {sections_of_threads})"
    hint_sections = g.sections(("suggested-response",), body="hint-body", prefix="hint") if hints else ""
    return g.render('"<observations>\\n"', body, '"</observations>"', hint_sections, g.sections(sections))


# --- reading the request ------------------------------------------------------------------------
def transcript_times(transcript: str) -> dict[str | None, dict[str, tuple[str, ...]]]:
    """The dates and times of a rendered transcript (`transcript.render_transcript`), per
    thread block (`<thread id>`; None outside any): date "Mar 9, 2024" → times "21:15", in
    order.  A line without a time label has the time of the line before, so the labels are
    every time there is.  A message body that happens to hold such lines only adds choices."""
    out: dict[str | None, dict[str, list[str]]] = {}
    thread: str | None = None
    date: str | None = None
    for line in transcript.split("\n"):
        opened = _THREAD_OPEN.match(line)
        if opened:
            thread, date = opened.group(1), None
            continue
        header = DATE_HEADER.match(line)
        if header:
            month, day, year = header.groups()
            date = f"{month} {int(day)}, {year}"
            out.setdefault(thread, {}).setdefault(date, [])
            continue
        clock = _CLOCK.match(line)
        if clock and date is not None:
            time = clock24(*clock.groups())
            times = out[thread][date]
            if time not in times:
                times.append(time)
    return {t: {d: tuple(times) for d, times in dates.items()} for t, dates in out.items()}


def _between(text: str, start: str, end: str) -> str | None:
    """The text after the first `start` up to the last `end` (widest: a message that quotes a
    heading then only adds choices), or None when either is missing."""
    at = text.find(start)
    stop = text.rfind(end)
    if at < 0 or stop < at:
        return None
    return text[at + len(start):stop]


def _split_system(system: str) -> tuple[str, tuple[str, ...]]:
    """The system prompt's own part (before the user's instructions and the extractors'
    sections), and the inline extractors' slugs it asks for."""
    extra = system.find(_EXTRA)
    slugs = tuple(dict.fromkeys(_SLUG_LINE.findall(system[extra:]))) if extra >= 0 else ()
    cut = min(i for i in (system.find(_CUSTOM), extra, len(system)) if i >= 0)
    return system[:cut], slugs


def request_grammar(system: str, user: str, *, reflector: bool, resource: bool) -> str | None:
    """The grammar of the answer an Observer or Reflector request (its system and user text)
    asks for, or None when the request shows nothing to anchor one on (no dated message)."""
    own, slugs = _split_system(system)
    if reflector:
        log = _between(user, _LOG, _LOG_END) or ""
        return reflector_grammar(
            hints="<suggested-response>" in own, sections=slugs,
            dates=tuple(dict.fromkeys(_LOG_DATE.findall(log))),
            thread_ids=tuple(dict.fromkeys(_LOG_THREAD.findall(log))) if resource else ())
    transcript = _between(user, _HISTORY, _TASK)
    if transcript is None:
        return None
    times = transcript_times(transcript)
    hints = "<current-task>" in own or "<suggested-response>" in own
    if resource:
        threads = {t: d for t, d in times.items() if t is not None and _usable(d)}
        if not threads:
            return None
        return resource_observer_grammar(threads, hints=hints, title="<thread-title>" in own, sections=slugs)
    dates: dict[str, tuple[str, ...]] = {}
    for per_thread in times.values():  # a single-thread transcript has no thread blocks
        for date, found in per_thread.items():
            dates[date] = tuple(dict.fromkeys((*dates.get(date, ()), *found)))
    if not _usable(dates):
        return None
    return observer_grammar(dates, hints=hints, sections=slugs)
