"""The context window as it was at an event: a memory's kept events up to a `seq`, folded into a
fresh projection (`GET /threads/{threadId}/context?asOf=SEQ`, the dashboard's timeline).

The projection is a pure function of the events it applies, in `seq` order, so replaying the
memory's history up to `seq` into a new `ContextProjection` gives exactly the view a reader
would have been served right after that event: the observations, the unobserved messages, the
hints, the cycle in flight.  Nothing is stored per `seq`; the price is one pass over the
memory's events per question, which is what a person moving a cursor asks for.

Only the `EventHistory` public API is used (`since`, `last_seq`, `HistoryEntry.event`), so the
answer is the same whether the history is kept in memory or in a persistent read model.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import tzinfo
from typing import Any

from omstream.engine.rules.resolution import ResolvedRetrieval
from omstream.schemas.base import iso

from .context import ContextProjection, ThreadView
from .history import EventHistory, HistoryEntry
from .resource_views import ResourceRendering
from .working_memory import WorkingMemoryRendering

__all__ = ["context_as_of", "fold_until", "parse_seq"]


def parse_seq(raw: str) -> int:
    """A `seq` from a query parameter; `ValueError` for anything but a non-negative integer."""
    try:
        seq = int(raw)
    except ValueError:
        raise ValueError(f"asOf must be a seq (a non-negative integer), not {raw!r}") from None
    if seq < 0:
        raise ValueError("asOf must not be negative")
    return seq


Folded = tuple[ContextProjection, HistoryEntry | None, dict[str, Any] | None]


def fold_until(entries: Iterable[HistoryEntry], seq: int, time_zone: str | tzinfo = "UTC",
               retrieval: ResolvedRetrieval | None = None, *,
               resource: ResourceRendering = ResourceRendering(),
               working_memory: WorkingMemoryRendering | None = None) -> Folded:
    """The projection of the entries up to `seq` (included), the last entry applied, and the
    token windows of the last `data-om-status` among them (None before the first)."""
    projection = ContextProjection(time_zone=time_zone, retrieval=retrieval, resource=resource,
                                   working_memory=working_memory)
    last: HistoryEntry | None = None
    windows: dict[str, Any] | None = None
    for entry in entries:
        if entry.seq > seq:
            break  # entries come in seq order
        projection.apply_event(entry.event)
        last = entry
        if entry.type == "data-om-status":
            windows = entry.part.data.get("windows")
    return projection, last, windows


def context_as_of(history: EventHistory, memory_key: str, thread_id: str, seq: int,
                  time_zone: str | tzinfo = "UTC", retrieval: ResolvedRetrieval | None = None, *,
                  resource: ResourceRendering = ResourceRendering(),
                  working_memory: WorkingMemoryRendering | None = None) -> dict[str, Any] | None:
    """The thread's context answer as of the memory's event `seq`, with `asOf` (the seq of the
    last event applied, at most `seq`), `lastSeq` (the memory's newest), `event` (what that
    event was) and `windows` (the token windows as of then).  None when the memory has no
    kept events."""
    entries = history.since(memory_key, 0)
    if not entries:
        return None
    projection, last, windows = fold_until(entries, seq, time_zone, retrieval, resource=resource,
                                           working_memory=working_memory)
    # Before its first event (or before its first message, in resource scope) the thread had
    # an empty memory: an empty view says so rather than a 404 for a thread that exists now.
    if thread_id in projection.threads:
        snapshot = projection.snapshot(thread_id)
    else:
        snapshot = ThreadView(thread_id, memory_key=memory_key, time_zone=time_zone, retrieval=retrieval,
                              working_memory=working_memory).snapshot()
    return {
        **snapshot,
        "stale": False,
        "asOf": last.seq if last is not None else 0,
        "lastSeq": history.last_seq(memory_key),
        "event": None if last is None else {
            "seq": last.seq, "type": last.part.type, "id": last.part.id,
            "eventTime": _event_time(last)},
        "windows": windows,
    }


def _event_time(entry: HistoryEntry) -> str | None:
    """The event's envelope time (a part's `data` carries the event's fields, not its envelope)."""
    at = getattr(entry.event, "event_time", None)
    return iso(at) if at is not None else None
