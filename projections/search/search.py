"""The recall tool's `search` mode (spec §12) over the index: `ObservationSearch.search`.

The query is embedded (as a query: e5 prefixes queries and passages differently), the memory's
nearest chunks are fetched with room to spare (`max(3 × topK, topK + 10)`, more while they fill
fewer than topK groups: a group has a chunk per observation), each group keeps its best score,
and the `topK` best groups are rendered as the original renders them, each with the observations
of it that were found, the whole answer cut to 2 000 tokens.  Only the memory's own entries are
searched (the store's `query` takes the memory key); a thread-scoped recall (no resource id)
searches the current thread's groups alone.
"""

from __future__ import annotations

from typing import Any

from omstream.engine.prompting.transcript import truncate_to_tokens
from omstream.engine.rules.tokens import TokenxCounter
from omstream.projections.search.embedding import Embedder

from ..recall.tool import DEFAULT_TOP_K, MAX_TOP_K
from .vectors import Hit, SearchStore, ThreadMeta

__all__ = ["MAX_RESULT_TOKENS", "NO_MATCH", "ObservationSearch", "render_hits"]

MAX_RESULT_TOKENS = 2000
#: The most chunks one query reads (sqlite-vec's own limit on k is 4096).
MAX_FETCH = 4096
NO_MATCH = "No matching messages found."


def _timestamp(value: str) -> str:
    """`2025-03-03T09:00:00.000Z` as the original shows it: `2025-03-03 09:00:00Z`."""
    head, _, _ = value.partition(".")
    return head.replace("T", " ") + "Z" if "." in value else value.replace("T", " ")


def best_per_group(hits: list[Hit]) -> list[Hit]:
    """Each group once, with its best chunk's score, the best first; its text is the text of its
    chunks that were found, in their order in the group (the observations that matched)."""
    found: dict[str, list[Hit]] = {}
    for hit in hits:
        found.setdefault(str(hit.metadata.get("group_id", hit.id)), []).append(hit)
    groups = []
    for chunks in found.values():
        best = max(chunks, key=lambda h: h.score)
        ordered = sorted(chunks, key=lambda h: int(h.metadata.get("chunk", 0)))
        text = "\n".join(str(h.metadata.get("text") or "").strip() for h in ordered)
        groups.append(Hit(best.id, best.score, {**best.metadata, "text": text}))
    return sorted(groups, key=lambda h: -h.score)


def _section(hit: Hit, current_thread: str, thread: ThreadMeta | None) -> str:
    meta = hit.metadata
    thread_id = str(meta.get("thread_id", ""))
    current = thread_id == current_thread
    start, _, end = str(meta.get("range") or "").partition(":")
    lines = [
        "### Current thread memory" if current else "### Older memory from another thread",
        "",
        "This result came from the current thread." if current
        else "This result came from an older memory generation in another thread.",
        f"- thread: {thread_id}" + (f" ({thread.title or '(untitled)'})" if thread is not None else ""),
        f"- source: raw messages from ID {start or '(unknown)'} through ID {end or '(unknown)'}"
        if meta.get("range") else "- source: raw message range unavailable",
    ]
    if thread is not None and thread.updated_at:
        lines.append(f"- thread updated: {_timestamp(thread.updated_at)}")
    if meta.get("group_id"):
        lines.append(f"- observation group: {meta['group_id']}")
    lines += [f"- score: {hit.score:.2f}", "", "```text",
              str(meta.get("text") or "").strip() or "_Observation text unavailable._", "```"]
    return "\n".join(lines)


def render_hits(hits: list[Hit], current_thread: str, threads: dict[str, ThreadMeta | None],
                max_tokens: int = MAX_RESULT_TOKENS) -> str:
    """The results text: one section per group, cut to `max_tokens` tokens."""
    text = "\n\n".join(_section(hit, current_thread, threads.get(str(hit.metadata.get("thread_id"))))
                       for hit in hits)
    return truncate_to_tokens(text, max_tokens, TokenxCounter().count)


class ObservationSearch:
    """The `SearchPort` of the recall operation, over a `SearchStore` and its embedder."""

    def __init__(self, store: SearchStore, embedder: Embedder, max_tokens: int = MAX_RESULT_TOKENS) -> None:
        self.store, self.embedder, self.max_tokens = store, embedder, max_tokens

    async def search(self, *, memory_key: str, thread_id: str, resource_id: str | None, query: str,
                     top_k: int = DEFAULT_TOP_K) -> dict[str, Any]:
        """`{results, count}` of spec §12's search mode for the memory `memory_key`."""
        top_k = min(max(int(top_k), 1), MAX_TOP_K)
        if not query.strip():
            return {"results": NO_MATCH, "count": 0}
        vector = (await self.embedder.embed([query], query=True))[0]
        scope = None if resource_id is not None else thread_id
        fetch = max(top_k * 3, top_k + 10)
        while True:
            hits = self.store.query(vector, memory_key=memory_key, top_k=fetch, thread_id=scope)
            groups = best_per_group(hits)[:top_k]
            # A group has a chunk per observation: the nearest chunks may fill fewer groups.
            if len(groups) >= top_k or len(hits) < fetch or fetch >= MAX_FETCH:
                break
            fetch = min(fetch * 4, MAX_FETCH)
        if not groups:
            return {"results": NO_MATCH, "count": 0}
        threads = {}
        for hit in groups:
            tid = str(hit.metadata.get("thread_id"))
            meta = self.store.thread(tid)
            threads[tid] = meta if meta is not None and meta.memory_key == memory_key else None
        return {"results": render_hits(groups, thread_id, threads, self.max_tokens), "count": len(groups)}
