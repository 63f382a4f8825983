"""Deleting one thread of a resource memory: its messages and its sections leave, nothing else.

In resource scope one memory holds every thread of a user, so `thread-deleted` cannot wipe the
memory as it does in thread scope.  What belongs to the thread goes:

- its unobserved messages (temporal-gap markers included) and the inputs of it the memory holds
  behind a blocking cycle;
- every `<thread id="…">` section of it in the observations, with the observation groups inside
  (retrieval on: the ranges of its messages), a chunk left empty going with its boundary; and its
  per-thread metadata (last observed time, hints, title);
- a blocking cycle in flight that read it (a reflection, or an observation covering its
  messages or shown its sections as previous observations): the cycle fails for the other threads it covered,
  whose messages stay for the next cycle, and its answer is ignored when it comes, since it
  may carry the deleted thread's words into another thread's section.

What stays: text a reflection wrote outside any `<thread>` section (the reflector merged it
across threads, so no rule can tell whose it is; its group's range may still name the thread's
messages, which recall no longer finds), the resource's extractor values and working
memory (they belong to the resource), and the ids of the thread's messages (message ids are
immutable within a memory: a copy replayed later is still a duplicate, not a new message).
The `om-memory-deleted` event names the thread and carries the observations that remain, so the
read side can drop the thread's view and give the other threads the new text.
"""

from __future__ import annotations

import re
from datetime import datetime

from omstream.schemas.control import ThreadDeleted
from omstream.schemas.events import MemoryDeleted, MemoryDeletedData

from ..prompting.observations import split_keeping_boundaries
from ..prompting.sections import shown_thread_id
from ..rules.resource import thread_of
from ..state import ThreadMemory
from ..step import Step
from .jobs import failed
from .multi_observing import fail_thread

__all__ = ["delete_resource_thread", "without_thread_sections"]

_CANCELLED = "cancelled: thread {} of the resource was deleted while this cycle read it"


def without_thread_sections(observations: str, shown_id: str) -> str:
    """`observations` without the `<thread id="shown_id">` sections; a chunk that held nothing
    else is dropped with the boundary before it (after it, for the first chunk)."""
    section = re.compile(rf'<thread id="{re.escape(shown_id)}">\n.*?\n?</thread>', re.DOTALL)
    pieces = split_keeping_boundaries(observations)
    kept: list[str] = []
    for i in range(0, len(pieces), 2):
        chunk = section.sub("", pieces[i])
        chunk = re.sub(r"\n{3,}", "\n\n", chunk).strip("\n") if chunk != pieces[i] else chunk
        if not chunk.strip():
            continue
        if kept:
            kept.append(pieces[i - 1])
        kept.append(chunk)
    return "".join(kept)


def delete_resource_thread(step: Step, event: ThreadDeleted) -> None:
    thread = event.thread_id
    now = step.now(event.at)
    _cancel_cycle_reading(step, thread, now)
    state = step.state
    shown = shown_thread_id(thread, step.config.resolved.obscure_thread_ids)
    observations = without_thread_sections(state.observations, shown)
    threads = {t: meta for t, meta in state.threads.items() if t != thread}
    changed = observations != state.observations
    step.update(
        pending=tuple(m for m in state.pending if thread_of(m, state) != thread),
        held=tuple(raw for raw in state.held if raw.get("threadId") != thread),
        observations=observations,
        observation_tokens=step.config.counter.count(observations) if changed else state.observation_tokens,
        threads=threads, cursor=_cursor(threads), focus=None if state.focus == thread else state.focus,
        # Shorter observations may reflect again: a suppression stands only while the log is unchanged.
        reflection_suppressed_at=None if changed else state.reflection_suppressed_at,
    )
    step.emit(MemoryDeleted, MemoryDeletedData(
        reason="thread-deleted", generation_count=state.generation, observations=observations,
    ), now, thread_id=thread)


def _cursor(threads: dict[str, ThreadMemory]) -> datetime | None:
    """The record's cursor: the newest observed time of the threads left (spec §6.10)."""
    times = [meta.last_observed_at for meta in threads.values() if meta.last_observed_at is not None]
    return max(times) if times else None


def _cancel_cycle_reading(step: Step, thread: str, now: datetime) -> None:
    """Fail the blocking cycle in flight if it read `thread` (see the module doc)."""
    cycle = step.state.in_flight
    if cycle is None:
        return
    shown = shown_thread_id(thread, step.config.resolved.obscure_thread_ids)
    mine = {m.id for m in step.state.pending if thread_of(m, step.state) == thread}
    # An observer request shows the whole log as previous observations: it read the thread's
    # sections even when it covers none of its messages.
    read = f'<thread id="{shown}">' in step.state.observations
    if cycle.kind == "observe" and not read and not mine.intersection(cycle.message_ids):
        return
    error = _CANCELLED.format(shown)
    step.update(in_flight=None, blocked_since=None)
    if cycle.batches:
        for other in (t for batch in cycle.batches for t in batch if t != thread):
            fail_thread(step, cycle, other, error, now, 0)
    else:
        failed(step, cycle, "reflection" if cycle.kind == "reflect" else "observation", error, now, 0)
