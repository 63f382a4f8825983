"""Reading the Observer's answer (spec §7.5, §7.6)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ObserverOutput", "is_degenerate", "parse_observer_output"]

MAX_LINE_CHARS = 10_000
_RUN_BUDGET = 10_000  # characters one repeated line may fill back to back
_LONG_LINE = 24  # shorter lines (bullets like "* -> ran ls") are not evidence of a loop
_OBSERVATIONS = re.compile(r"^[ \t]*<observations>([\s\S]*?)^[ \t]*</observations>", re.MULTILINE)
_LIST_LINE = re.compile(r"^\s*(?:[-*]|\d+\.)\s")


@dataclass(frozen=True, slots=True)
class ObserverOutput:
    observations: str
    current_task: str | None = None
    suggested_response: str | None = None
    degenerate: bool = False


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


def parse_observer_output(raw: str) -> ObserverOutput:
    if is_degenerate(raw):
        return ObserverOutput(observations="", degenerate=True)
    current_task = _tag(raw, "current-task")
    suggested = _tag(raw, "suggested-response")
    stripped = re.sub(r"<(current-task|suggested-response|thread-title)>[\s\S]*?</\1>", "", raw)
    blocks = [b.strip() for b in _OBSERVATIONS.findall(stripped)]
    if blocks:
        observations = "\n".join(b for b in blocks if b)
    else:
        observations = "\n".join(line for line in stripped.split("\n") if _LIST_LINE.match(line))
    return ObserverOutput(_truncate_long_lines(observations.strip()), current_task, suggested)
