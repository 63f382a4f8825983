"""Observation groups of a resource memory's reflection (spec §12, §6.10).

A resource memory's log is `<thread id>` sections, and with retrieval on each section holds the
groups its thread's observations wrote (`multi_observing`).  A reflection rewrites the whole log;
the reflector keeps one section per thread and writes what holds for every thread outside them
(`thread_answers.parse_reflection_sections`).  Its groups follow that shape, so that a group
never spans two threads' sections, a later observation of a thread can continue its section
without nesting a group in a group, and deleting a thread takes its reflected group with it:

- each thread section of the reflection becomes one `kind="reflection"` group inside the
  section, its range spanning the groups of that thread's sections in the reflected log;
- each run of text outside the sections becomes one `kind="reflection"` group spanning every
  group of the reflected log (the reflector merged it across threads, so no thread owns it).

Ids are drawn from the memory key, the cycle, the section's place and the thread's shown id (or
the run's place), so they are distinct within the cycle and the same on every refold.  A log
written before retrieval was turned on has no group, and its reflection stays bare, as in thread
scope.
"""

from __future__ import annotations

from .groups import ObservationGroup, combine_ranges, group_id, parse_groups, strip_groups, thread_cycle, wrap_group
from .sections import section_bodies, split_sections, wrap_section

__all__ = ["resource_reflection_groups"]


def _groups_by_thread(source: str) -> dict[str, list[ObservationGroup]]:
    found: dict[str, list[ObservationGroup]] = {}
    for shown, body in section_bodies(source):
        found.setdefault(shown, []).extend(parse_groups(body))
    return found


def resource_reflection_groups(text: str, source: str, memory_key: str, cycle_id: str) -> str:
    """The reflection `text` of the log `source`, its sections and outside runs grouped."""
    every = parse_groups(source)
    if not every or not text.strip():
        return text
    by_thread = _groups_by_thread(source)
    pieces: list[str] = []
    for n, (shown, piece) in enumerate(split_sections(text)):
        if shown is None:
            pieces.append(_outside(piece, every, memory_key, f"{cycle_id}/outside/{n}"))
            continue
        body, own = strip_groups(piece), by_thread.get(shown)
        if own and body.strip():
            gid = group_id(memory_key, thread_cycle(f"{cycle_id}/{n}", shown))  # a thread may have two
            body = wrap_group(body, gid, combine_ranges(own), kind="reflection")
        pieces.append(wrap_section(shown, body))
    return "".join(pieces)


def _outside(run: str, every: list[ObservationGroup], memory_key: str, key: str) -> str:
    """A run of text between sections, grouped when it holds anything, its blank margins kept."""
    content = strip_groups(run).strip()
    if not content:
        return run
    lead = run[:len(run) - len(run.lstrip())]
    trail = run[len(run.rstrip()):]
    return f"{lead}{wrap_group(content, group_id(memory_key, key), combine_ranges(every), kind='reflection')}{trail}"
