"""Reading a model's answer about several threads (spec §7.4, §7.5 multi-thread, §8.1).

A multi-thread observer answers one `<observations>` block holding one `<thread id="…">`
section per thread, each with its own `Date:` lines, bullets and hint sections; a reflector of a
resource memory keeps those sections and writes what holds for every thread outside them.  Each
section is read with the single-thread parser (`parsing.parse_observer_output`), so every repair
it makes applies per thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .parsing import ObserverOutput, is_degenerate, parse_observer_output
from .sections import wrap_section

__all__ = ["ThreadAnswer", "parse_reflection_sections", "parse_thread_answer"]

_BLOCK = re.compile(r"<observations>(.*?)</observations>", re.DOTALL)
_OPEN = re.compile(r'<thread id="([^"]*)">')
_CLOSE = "</thread>"
_TITLE = re.compile(r"<thread-title>(.*?)</thread-title>", re.DOTALL)


@dataclass(frozen=True)
class ThreadAnswer:
    """What the observer wrote for one thread: its observations and hints, and the title it
    proposed (`observation.threadTitle`), if any."""

    output: ObserverOutput
    title: str | None = None


def _split(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The text outside thread sections, and each section's (id, body); an unclosed section
    runs to the end."""
    outside: list[str] = []
    sections: list[tuple[str, str]] = []
    at = 0
    while (opened := _OPEN.search(text, at)) is not None:
        outside.append(text[at:opened.start()])
        end = text.find(_CLOSE, opened.end())
        stop = len(text) if end < 0 else end
        sections.append((opened.group(1), text[opened.end():stop].strip("\n")))
        at = len(text) if end < 0 else end + len(_CLOSE)
    outside.append(text[at:])
    return "".join(outside), sections


def _parse(body: str, previous: str = "") -> ObserverOutput:
    return parse_observer_output(f"<observations>\n{body}\n</observations>", previous)


def parse_thread_answer(raw: str, shown_ids: tuple[str, ...], previous: str = "",
                        ) -> dict[str, ThreadAnswer] | str:
    """Each asked thread's observations (by shown id; a thread the answer leaves out gets
    none), or why the answer cannot be used."""
    if is_degenerate(raw):
        return "Observer produced degenerate output"
    block = _BLOCK.search(raw)
    _, sections = _split(block.group(1) if block else raw)
    asked = set(shown_ids)
    parsed: dict[str, ThreadAnswer] = {}
    for shown, body in sections:
        if shown in asked and shown not in parsed:  # the first section of a thread counts
            title = _TITLE.search(body)
            parsed[shown] = ThreadAnswer(_parse(body, previous), title.group(1).strip() if title else None)
    if not any(p.output.observations for p in parsed.values()):
        return "Observer returned no observations"
    return parsed


def parse_reflection_sections(raw: str) -> ObserverOutput:
    """A resource memory's reflection: the facts outside sections, then each thread section,
    every part read as a single-thread answer and the sections written back around them."""
    if is_degenerate(raw):
        return ObserverOutput(observations="", degenerate=True)
    block = _BLOCK.search(raw)
    outside, sections = _split(block.group(1) if block else raw)
    if not sections:
        return parse_observer_output(raw)
    common = _parse(outside.strip("\n")) if outside.strip() else None
    parts = [common.observations] if common and common.observations else []
    for shown, body in sections:
        section = _parse(body)
        if section.observations:
            parts.append(wrap_section(shown, section.observations))
    hints = parse_observer_output(raw)
    return ObserverOutput("\n\n".join(parts), hints.current_task, hints.suggested_response)
