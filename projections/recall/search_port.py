"""The port semantic search plugs into (spec §12 `search` mode).

A search index lives behind it (embedder, vector store, the projection that indexes observation
groups); recall only asks it.  Without one, `search` answers the fixed "not configured" text.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["SEARCH_NOT_CONFIGURED", "SearchPort", "not_configured"]

SEARCH_NOT_CONFIGURED = ("Search is not configured. Enable it with `retrieval: { vector: true }` and configure "
                         "a vector store and embedder for the memory.")


class SearchPort(Protocol):
    async def search(self, *, memory_key: str, thread_id: str, resource_id: str | None, query: str,
                     top_k: int) -> dict[str, Any]:
        """The spec's `{results, count}` for `query`: at most `top_k` matches, rendered within the
        result budget.  `memory_key` is the asking thread's memory; `thread_id` the asking thread.
        `resource_id` None means thread scope: only `thread_id`'s groups may match; otherwise the
        groups of every thread of that resource may (and of no other resource)."""
        ...


def not_configured() -> dict[str, Any]:
    return {"results": SEARCH_NOT_CONFIGURED, "count": 0}
