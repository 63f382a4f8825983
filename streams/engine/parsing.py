"""Reading the Observer's answer (spec §7.5, §7.6)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ObserverOutput", "is_degenerate", "parse_observer_output"]

MAX_LINE_CHARS = 10_000
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


def is_degenerate(text: str) -> bool:
    """A looping answer: repeated 200-char windows, a giant line, or mostly repeated long lines."""
    if len(text) < 2000:
        return False
    step = max(1, len(text) // 50)
    windows = [text[i:i + 200] for i in range(0, len(text) - 200, step)]
    if len(windows) > 5 and (len(windows) - len(set(windows))) / len(windows) > 0.4:
        return True
    lines = text.split("\n")
    if any(len(line) > 50_000 for line in lines):
        return True
    long_lines = [line.strip() for line in lines if len(line.strip()) >= 24]
    return len(long_lines) >= 20 and (len(long_lines) - len(set(long_lines))) / len(long_lines) > 0.5


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
