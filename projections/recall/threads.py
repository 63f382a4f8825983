"""`mode: "threads"` (spec §12): the resource's threads, most recently updated first, filtered
by creation date (`before`, `after`) and paged (`page` from 0, `limit` up to 50); in thread
scope only the current thread."""

from __future__ import annotations

from typing import Any

from .params import parse_date
from .parts import format_timestamp
from .source import RecallSource, ThreadInfo

__all__ = ["current_thread", "list_threads"]

MAX_THREADS = 50


def _lines(thread: ThreadInfo, current: str) -> list[str]:
    marker = " ← current" if thread.id == current else ""
    return [f"- **{thread.title or '(untitled)'}**{marker}", f"  id: {thread.id}",
            f"  updated: {format_timestamp(thread.updated_at)} | created: {format_timestamp(thread.created_at)}"]


def current_thread(source: RecallSource, thread_id: str) -> dict[str, Any]:
    thread = source.thread(thread_id)
    if thread is None:
        return {"error": "Could not resolve current thread."}
    return {"threads": "\n".join(_lines(thread, thread_id)), "count": 1, "page": 0, "hasMore": False}


def list_threads(source: RecallSource, resource_id: str, current: str, *, page: int | None, limit: int | None,
                 before: str | None, after: str | None) -> dict[str, Any]:
    number = max(page or 0, 0)
    size = min(max(limit or 20, 1), MAX_THREADS)
    threads = source.threads(resource_id)
    if before is not None:
        threads = [t for t in threads if t.created_at < parse_date(before)]
    if after is not None:
        threads = [t for t in threads if t.created_at > parse_date(after)]
    offset = number * size
    shown = threads[offset:offset + size]
    if not shown:
        return {"threads": "No threads found matching the criteria.", "count": 0, "page": number, "hasMore": False}
    return {"threads": "\n".join(line for t in shown for line in _lines(t, current)), "count": len(shown),
            "page": number, "hasMore": offset + size < len(threads)}
