"""Reading the Observer's answer (spec §7.5, §7.6), with recovery for small models.

A small local model (`local/qwen2.5-1.5b`) drifts from the contract in recurring ways: no
`<observations>` tags or tags that do not start a line, prose around the list, bullets without a
priority emoji, times as `(6:05 PM)`, dates as `2026-05-02`, lines copied from the prompt's
format example, and loops of the same few lines.  What can be repaired without guessing is
repaired, and every repair is *named* in `ObserverOutput.recovered`, so a benchmark can tell an
answer that kept the contract (`parse_outcome` "clean") from one that needed help ("recovered")
and one that is unusable ("failed": degenerate, or nothing left).  An answer that keeps the
contract goes through none of the repairs: it parses exactly as the spec's parser would.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from .transcript import MONTHS

__all__ = [
    "RECOVERIES",
    "ObserverOutput",
    "ParseOutcome",
    "is_degenerate",
    "parse_observer_output",
    "parse_outcome",
]

MAX_LINE_CHARS = 10_000
_RUN_BUDGET = 10_000  # characters one repeated line may fill back to back
_LONG_LINE = 24  # shorter lines (bullets like "* -> ran ls") are not evidence of a loop
_OBSERVATIONS = re.compile(r"^[ \t]*<observations>([\s\S]*?)^[ \t]*</observations>", re.MULTILINE)
_LIST_LINE = re.compile(r"^\s*(?:[-*]|\d+\.)\s")

#: Every recovery the parser may apply, in the order it applies them.
RECOVERIES = (
    "missing-tags",     # no well-formed <observations> block: unclosed, inline, or none at all
    "prose-dropped",    # text around the list (outside the block, or chatter inside it) dropped
    "thread-tags",      # <thread> tags in a single-thread answer removed
    "list-format",      # "-", "1." or "•" bullets, or bare lines in a block, written as "* "
    "date-format",      # a date line in another form written as "Date: Mon D, YYYY"
    "time-format",      # "(6:05 PM)", "6:05 PM", "[18:05]", "(18:05:00)" written as "(18:05)"
    "priority-added",   # a bullet without a priority emoji: 🟡, or the priority word's emoji
    "time-added",       # a bullet without a time: the time of the line before (or after) it
    "example-copied",   # a line (or <current-task>/<suggested-response>) of the prompt's example dropped
    "repeated-lines",   # a line repeating an earlier or a previous observation (times aside) dropped
)

ParseOutcome = Literal["clean", "recovered", "failed"]


@dataclass(frozen=True, slots=True)
class ObserverOutput:
    observations: str
    current_task: str | None = None
    suggested_response: str | None = None
    degenerate: bool = False
    recovered: tuple[str, ...] = ()
    """The repairs applied to the answer (names from `RECOVERIES`); empty for a clean answer."""


def _tag(text: str, name: str) -> str | None:
    match = re.search(rf"<{name}>([\s\S]*?)</{name}>", text)
    value = match.group(1).strip() if match else ""
    return value or None


def _truncate_long_lines(text: str) -> str:
    return "\n".join(
        line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " … [truncated]"
        for line in text.split("\n")
    )


def _collapse_runs(lines: list[str]) -> tuple[list[str], int]:
    """Back-to-back identical lines become one; also the size (chars) of the largest repeated run."""
    out: list[str] = []
    largest = run = 0
    for line in lines:
        if out and line == out[-1]:
            run += len(line) + 1
            largest = max(largest, run)
        else:
            out.append(line)
            run = len(line) + 1
    return out, largest


def is_degenerate(text: str) -> bool:
    """A looping answer (spec §7.6 with the upstream refinements, §15 item 9).

    Runs of one repeated line are collapsed first (a tool called 200 times in a row is real
    content) unless the run itself exceeds 10 000 characters; short lines never count as
    repetition; a single giant line is truncated by the parser, not treated as a loop.
    """
    if len(text) < 2000:
        return False
    lines, largest_run = _collapse_runs(text.split("\n"))
    if largest_run > _RUN_BUDGET:
        return True
    long_lines = [line.strip() for line in lines if len(line.strip()) >= _LONG_LINE]
    if len(long_lines) >= 20 and (len(long_lines) - len(set(long_lines))) / len(long_lines) > 0.5:
        return True
    body = "\n".join(long_lines)
    step = max(1, len(body) // 50)
    windows = [body[i:i + 200] for i in range(0, len(body) - 200, step)]
    return len(windows) > 5 and (len(windows) - len(set(windows))) / len(windows) > 0.4


# --- recovery ----------------------------------------------------------------------------------
_PRIORITIES = ("🔴", "🟡", "🟢", "✅")
_PRIORITY_WORDS = {"high": "🔴", "critical": "🔴", "medium": "🟡", "med": "🟡", "low": "🟢",
                   "done": "✅", "completed": "✅", "complete": "✅"}
_MONTH_RE = r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"

# The exact shape the contract asks for: "* 🔴 (14:30) text" (any indentation for sub-bullets).
_CLEAN_LINE = re.compile(r"^\s*\* (?:🔴|🟡|🟢|✅) \(\d{2}:\d{2}\) \S")
_CLEAN_SUB = re.compile(r"^\s+\* (?:->|✅|🔴|🟡|🟢)\s?\S")
_CLEAN_DATE = re.compile(r"^Date: (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{1,2}, \d{4}$")
_CLEAN_BARE_DONE = re.compile(r"^\s*\* ✅ \S")  # "* ✅ Tests passing" sub-results

# Other forms, repaired.
_BULLET = re.compile(r"^(?P<indent>\s*)(?:[-*•+]|\d{1,3}[.)])\s+(?P<rest>.*)$")
_DATE_FORMS = (
    re.compile(rf"^(?:date\s*:?\s*)?{_MONTH_RE}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<year>\d{{4}}):?$",
               re.IGNORECASE),
    re.compile(r"^(?:date\s*:?\s*)?(?P<year>\d{4})-(?P<m>\d{1,2})-(?P<day>\d{1,2}):?$", re.IGNORECASE),
    re.compile(rf"^(?:date\s*:?\s*)?(?P<day>\d{{1,2}})\s+{_MONTH_RE}\s+(?P<year>\d{{4}}):?$", re.IGNORECASE),
)
_TIME_24 = re.compile(r"^\((?P<h>\d{2}):(?P<m>\d{2})\)\s*")
_TIME_ANY = re.compile(
    r"^[(\[]?(?P<h>\d{1,2}):(?P<m>\d{2})(?::\d{2})?\s*(?P<half>[AaPp]\.?[Mm]\.?)?[)\]]?(?:\s*[-:–]\s+|\s+|$)")
_PRIORITY_WORD = re.compile(  # "High:", "[low]", "(Medium priority)", "Low priority -"
    r"^(?:[(\[](?P<w1>high|critical|medium|med|low|done|completed)(?:\s+priority)?[)\]]:?"
    r"|(?P<w2>high|critical|medium|med|low|done|completed)(?:\s+priority)?\s*[:\-–]"
    r"|(?P<w3>high|critical|medium|low)\s+priority:?)\s+",
    re.IGNORECASE)
_TRAILING_TIME = re.compile(r"\s*[-–,]?\s*(\(\d{1,2}:\d{2}(?::\d{2})?\s*(?:[AaPp]\.?[Mm]\.?)?\))\.?$")
_EMPHASIS = re.compile(r"^\*\*(.*)\*\*:?$")
_THREAD_TAG = re.compile(r"^\s*</?thread\b[^>]*>\s*$")
_OPEN = re.compile(r"<observations>", re.IGNORECASE)
_CLOSE = re.compile(r"</observations>", re.IGNORECASE)
_SECTIONS = re.compile(r"<(current-task|suggested-response|thread-title)>[\s\S]*?</\1>")
_UNCLOSED_SECTION = re.compile(r"<(current-task|suggested-response|thread-title)>(?![\s\S]*</\1>)[\s\S]*$")
_OPEN_SECTION = re.compile(r"<(current-task|suggested-response|thread-title)>")
_MIN_REPEAT = 12  # shorter contents ("User said hi") may well be said twice
_FENCE = re.compile(r"^\s*```")
_PROMPT_HEADING = re.compile(r"^[ \t]*## (?:Previous Observations|Prior Thread Metadata|New Message History"
                             r"|Your Task|OBSERVATIONS TO REFLECT ON)", re.IGNORECASE | re.MULTILINE)
_ECHO = re.compile(r"^\s*(?:User|Assistant|Signal|Tool [A-Za-z]+ \S+)(?: \(\d{1,2}:\d{2} [AP]M\))?: ")


@functools.cache
def _example_lines() -> frozenset[str]:
    """The content of the format examples, today's and earlier ones (normalised)."""
    from .prompts import FORMAT_EXAMPLE_LINES  # the prompt owns its example

    return frozenset(_norm(text) for text in FORMAT_EXAMPLE_LINES)


@functools.cache
def _example_starts() -> tuple[str, ...]:
    return tuple(e + " " for e in _example_lines())


@functools.cache
def _long_example_words() -> tuple[frozenset[str], ...]:
    """The word sets of the example lines long enough to be recognised by most of their words."""
    return tuple(frozenset(e.split()) for e in _example_lines() if len(e.split()) >= 8)


def _copies_example(content: str) -> bool:
    """The content of an example line, the start of one, or most words of a long one
    ("User stated their cat Miso is three years old and allergic to chicken")."""
    if content in _example_lines() or content.startswith(_example_starts()):
        return True
    words = set(content.split())
    return any(len(words & e) >= 0.7 * len(e) for e in _long_example_words())


@functools.cache
def _example_sections() -> frozenset[str]:
    from .prompts import FORMAT_EXAMPLE_SECTIONS

    return frozenset(_norm(text) for text in FORMAT_EXAMPLE_SECTIONS)


def _own_section(value: str | None, kinds: set[str]) -> str | None:
    """A <current-task> / <suggested-response> value, unless it copies the prompt's example."""
    if value is not None and _norm(value) in _example_sections():
        kinds.add("example-copied")
        return None
    return value


@functools.cache
def _example_dates() -> frozenset[str]:
    from .prompts import FORMAT_EXAMPLE_DATES

    return frozenset(f"Date: {date}" for date in FORMAT_EXAMPLE_DATES)


_WORD = re.compile(r"[a-z0-9]+")
_LINE_HEAD = re.compile(r"^(?:(?:[-*•+]|\d{1,3}[.)])\s+)?(?:(?:🔴|🟡|🟢|✅|->)\s*)?(?:\(\d{2}:\d{2}\)\s*)?")


def _norm(text: str) -> str:
    """Content for comparison: lower case, letters and digits only."""
    return " ".join(_WORD.findall(text.lower()))


def _content(line: str) -> str:
    """A line's text without bullet, priority, time and trailing punctuation."""
    return _norm(_LINE_HEAD.sub("", line.strip(), count=1))


def _date_line(text: str) -> str | None:
    """ "Date: Mon D, YYYY" for a line that only states a date, else None."""
    stripped = text.strip().strip("*#").strip()
    for form in _DATE_FORMS:
        m = form.match(stripped)
        if not m:
            continue
        if "mon" in m.groupdict() and m["mon"]:
            month = m["mon"][:3].capitalize()
        else:
            number = int(m["m"])
            if not 1 <= number <= 12:
                return None
            month = MONTHS[number - 1]
        day = int(m["day"])
        if 1 <= day <= 31:
            return f"Date: {month} {day}, {m['year']}"
    return None


def _time(rest: str) -> tuple[str | None, str, bool]:
    """(HH:MM, what follows, whether the form was repaired) for a leading time, if any."""
    m = _TIME_24.match(rest)
    if m and int(m["h"]) < 24 and int(m["m"]) < 60:
        return f"{m['h']}:{m['m']}", rest[m.end():], False
    m = _TIME_ANY.match(rest)
    if not m:
        return None, rest, False
    hour, minute = int(m["h"]), int(m["m"])
    if m["half"]:
        if not 1 <= hour <= 12:
            return None, rest, False
        hour = hour % 12 + (12 if m["half"][0].lower() == "p" else 0)
    if hour > 23 or minute > 59:
        return None, rest, False
    return f"{hour:02d}:{minute:02d}", rest[m.end():], True


@dataclass
class _Line:
    indent: str
    priority: str | None
    time: str | None
    text: str


def _priority(rest: str, kinds: set[str]) -> tuple[str | None, str]:
    """A leading priority emoji, or a priority word ("High:", "[low]"), and what follows."""
    for emoji in _PRIORITIES:
        if rest.startswith(emoji):
            return emoji, rest[len(emoji):].lstrip("\ufe0f").lstrip()
    word = _PRIORITY_WORD.match(rest)
    if word:
        kinds.add("priority-added")
        return _PRIORITY_WORDS[(word["w1"] or word["w2"] or word["w3"]).lower()], rest[word.end():]
    return None, rest


def _bullet(line: str, kinds: set[str]) -> _Line | str | None:
    """A list line taken apart (repairs noted in `kinds`), a date line, or None for prose."""
    date = _date_line(line)
    if date is not None:
        if line.strip() != date:
            kinds.add("date-format")
        return date
    m = _BULLET.match(line)
    if not m:
        return None
    indent, rest = m["indent"], m["rest"].strip()
    if not line.lstrip().startswith("* ") or line.lstrip().startswith("*  "):
        kinds.add("list-format")
    emphasis = _EMPHASIS.match(rest)
    if emphasis:  # "- **May 2, 2026**" as a date heading
        date = _date_line(emphasis.group(1))
        if date is not None:
            kinds.add("date-format")
            return date
    if rest.startswith("->") and not indent:  # a tool step written at the top level
        kinds.add("list-format")
        return _Line("  ", None, None, rest)
    priority, rest = _priority(rest, kinds)
    time, rest, repaired = _time(rest)
    if repaired:
        kinds.add("time-format")
    if time is None:  # "* 🔴 User stated X (6:00 PM)": the time at the end of the line
        trailing = _TRAILING_TIME.search(rest)
        if trailing:
            time, _, _ = _time(trailing.group(1))
            if time is not None:
                kinds.add("time-format")
                rest = rest[:trailing.start()].rstrip(" -–,")
    if priority is None and time is not None:  # "* (18:00) 🔴 ...": the priority after the time
        priority, after = _priority(rest, kinds)
        if priority is not None:
            kinds.add("list-format")
            rest = after
    return _Line(indent, priority, time, rest.strip())


def _observation_lines(body: list[str], kinds: set[str], *, in_block: bool = True) -> list[str]:
    """Every line of the answer's list in the contract's shape; the repairs named in `kinds`.

    Outside any block only list lines count (spec §7.5's fallback); inside a block, prose
    between list lines is kept (a reflection may hold a paragraph), but not transcript lines
    the model echoed ("User (6:00 PM): ...")."""
    parsed: list[_Line | str] = []
    prose_at: list[int] = []  # positions of prose lines among `parsed`, decided below
    echo = False  # inside an echoed transcript message: its next prose lines are its own
    for line in body:
        if _PROMPT_HEADING.match(line):  # the model went on to write the next prompt: stop
            kinds.add("prose-dropped")
            break
        if not line.strip() or _FENCE.match(line):
            if _FENCE.match(line):
                kinds.add("prose-dropped")
            parsed.append("")
            echo = False
            continue
        if _THREAD_TAG.match(line):
            kinds.add("thread-tags")
            continue
        item = _bullet(line, kinds)
        if item is None:
            # A transcript message may run over several lines (an attachment's caption below its
            # text): the lines after an echoed one, up to a list line or a blank, are the echo's.
            if not in_block or _ECHO.match(line) or echo:
                kinds.add("prose-dropped")
                echo = echo or bool(_ECHO.match(line))
                continue
            prose_at.append(len(parsed))
            parsed.append(line)
            continue
        echo = False
        parsed.append(item)
    # Prose before the first and after the last list line is chatter ("Here are the new
    # observations:"); between list lines it is content (a reflection's paragraph) and stays.
    listed = [i for i, item in enumerate(parsed) if not isinstance(item, str)]
    dated = [i for i, item in enumerate(parsed) if not isinstance(item, str) or item.startswith("Date: ")]
    first, last = (dated[0], listed[-1]) if listed else (len(parsed), -1)
    out: list[str] = []
    top = [item for item in parsed if isinstance(item, _Line) and not item.indent]
    times = [item.time for item in top]
    previous_time: str | None = None
    for i, item in enumerate(parsed):
        if isinstance(item, str):
            if i in prose_at and (i < first or i > last):
                kinds.add("prose-dropped")
                continue
            out.append(item.rstrip())
            continue
        if not item.text:
            continue
        if item.indent:  # a sub-bullet: "* -> ..." or "* ✅ ...", no time of its own needed
            out.append(f"{item.indent}* {item.priority + ' ' if item.priority else ''}"
                       f"{'(' + item.time + ') ' if item.time else ''}{item.text}")
            continue
        priority = item.priority
        if priority is None:
            if not item.text.startswith("->"):
                kinds.add("priority-added")
            priority = "🟡"
        time = item.time
        if time is None:
            following = next((t for t in times[top.index(item):] if t), None)
            time = previous_time or following
            if time is not None:
                kinds.add("time-added")
        previous_time = time or previous_time
        out.append(f"* {priority} ({time}) {item.text}" if time else f"* {priority} {item.text}")
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return out


_LIST_ITEM = re.compile(r"^\s*[-*]\s")


# Cached: every answer is compared with the whole log its prompt showed, which only grows by
# appends, so the same log lines are read again at every cycle (measured: 32 ms per answer
# against a 1,500-line log before, a burst's fold spent a fifth of its time here).
@functools.lru_cache(maxsize=1 << 16)
def _logged_content(line: str) -> str | None:
    """What a line of the log the prompt showed adds to the repeat check: the content of an
    observation long enough to count as a repeat, else None."""
    if not _LIST_ITEM.match(line):
        return None
    content = _content(line)
    return content if len(content) >= _MIN_REPEAT else None


def _drop_copies(lines: list[str], kinds: set[str], previous: str = "") -> list[str]:
    """Lines copied from the format example, and lines repeating the content of an earlier one
    or of a previous observation (`previous`, the log the prompt showed).

    A small model often writes the previous observations out again with new times instead of
    observing the new messages; appended, they would double the log.

    Repetition is collapsed here rather than judged degenerate.  The small model's loops come
    after its real observations: it alternates two or three lines with new invented times until
    `max_tokens`.  Keeping the first occurrence saves the real part, whereas a degenerate verdict
    would throw it away and cost a regeneration (about a minute on two cores) that, with the same
    sampling, tends to loop again.  The repeats carry nothing but invented times.  Long verbatim
    loops (≥ 2 000 characters of repeated lines or windows) stay degenerate by §7.6, checked
    before any of this, so the spec's regeneration still handles the cases it was written for.
    """
    examples = _example_lines()
    seen = {c for c in map(_logged_content, previous.split("\n")) if c}
    out: list[str] = []
    contents = [_content(line) for line in lines]
    copied = any(c in examples for c in contents)  # (exact copies bring the date)
    for line, content in zip(lines, contents):
        if copied and line.strip() in _example_dates():  # the example's date came with its lines
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("Date: "):
            out.append(line)
            continue
        if _copies_example(content):
            kinds.add("example-copied")
            continue
        if line.startswith("* ") and len(content) >= _MIN_REPEAT:  # top-level observations only
            if content in seen:
                kinds.add("repeated-lines")
                continue
            seen.add(content)
        out.append(line)
    # A date line left without observations under it (its lines were dropped) goes too.
    kept: list[str] = []
    for i, line in enumerate(out):
        if line.startswith("Date: "):
            following = next((x for x in out[i + 1:] if x.strip()), "")
            if not following or following.startswith("Date: "):
                continue
        kept.append(line)
    return [line for i, line in enumerate(kept) if line.strip() or (i and kept[i - 1].strip())]


def _is_clean(block: str) -> bool:
    """Every line of a block already has the contract's shape (the spec parser's input)."""
    for line in block.split("\n"):
        if not line.strip() or _CLEAN_DATE.match(line) or _CLEAN_LINE.match(line) \
                or _CLEAN_SUB.match(line) or _CLEAN_BARE_DONE.match(line):
            continue
        return False
    return True


def _recover(raw: str, stripped: str, blocks: list[str], previous: str) -> tuple[str, tuple[str, ...]]:
    """The observations of an answer that does not keep the contract, and the repairs made."""
    kinds: set[str] = set()
    in_block = True
    heading = _PROMPT_HEADING.search(stripped)
    if heading:  # the model went on to write a prompt of its own (with its own blocks): cut
        kinds.add("prose-dropped")
        stripped = stripped[:heading.start()]
        blocks = [b.strip() for b in _OBSERVATIONS.findall(stripped)]
    if blocks:
        body = "\n".join(b for b in blocks if b)
        outside = _OBSERVATIONS.sub("", stripped)
    else:
        kinds.add("missing-tags")
        opened = _OPEN.search(stripped)
        if opened:  # inline or unclosed: from the tag to its close, a section, or the end
            rest = stripped[opened.end():]
            end = _CLOSE.search(rest) or _OPEN_SECTION.search(rest)
            body = rest[:end.start()] if end else rest
            outside = stripped[:opened.start()] + (rest[end.end():] if end else "")
        else:
            body, outside = stripped, ""
        body = _CLOSE.sub("", body)
        in_block = bool(opened)
    # A section cut off by max_tokens ("<suggested-response>\nA ten-day ri") is not prose.
    outside = _UNCLOSED_SECTION.sub("", outside)
    if outside.strip():
        kinds.add("prose-dropped")
    lines = _drop_copies(_observation_lines(body.split("\n"), kinds, in_block=in_block), kinds, previous)
    if not any(line.startswith("* ") for line in lines):
        return "", tuple(k for k in RECOVERIES if k in kinds)
    return "\n".join(lines), tuple(k for k in RECOVERIES if k in kinds)


def parse_observer_output(raw: str, previous: str = "") -> ObserverOutput:
    """Spec §7.5: the degenerate check, the sections, then the `<observations>` blocks.

    An answer whose blocks keep the contract (every line a `Date:` line, a `* 🔴 (HH:MM) ...`
    observation or an indented sub-bullet) and that has nothing but the sections around them is
    read exactly as the spec reads it.  Any other answer is recovered as far as it can be
    (`RECOVERIES`); what is left may be empty, and the cycle then fails as before.  `previous`:
    the observations the prompt showed, whose lines the answer must not repeat.
    """
    if is_degenerate(raw):
        return ObserverOutput(observations="", degenerate=True)
    sections: set[str] = set()
    current_task = _own_section(_tag(raw, "current-task"), sections)
    suggested = _own_section(_tag(raw, "suggested-response"), sections)
    stripped = _SECTIONS.sub("", raw)
    blocks = [b.strip() for b in _OBSERVATIONS.findall(stripped)]
    outside = _UNCLOSED_SECTION.sub("", _OBSERVATIONS.sub("", stripped))
    if blocks and all(_is_clean(b) for b in blocks) and not outside.strip():
        observations = "\n".join(b for b in blocks if b)
        lines = observations.split("\n")
        kinds: set[str] = set()
        _drop_copies(lines, kinds, previous)
        if not kinds:
            return ObserverOutput(_truncate_long_lines(observations.strip()), current_task, suggested,
                                  recovered=tuple(sections))
    observations, recovered = _recover(raw, stripped, blocks, previous)
    recovered = tuple(k for k in RECOVERIES if k in {*recovered, *sections})
    return ObserverOutput(_truncate_long_lines(observations.strip()), current_task, suggested,
                          recovered=recovered)


def parse_outcome(raw: str, previous: str = "") -> ParseOutcome:
    """How an answer parsed: "clean" (kept the contract), "recovered" (usable after repairs),
    "failed" (degenerate, or no observation left: the cycle fails)."""
    parsed = parse_observer_output(raw, previous)
    if parsed.degenerate or not parsed.observations:
        return "failed"
    return "recovered" if parsed.recovered else "clean"
