"""The `recall` operation (spec §12): who asks (a thread, its resource, the tool's scope), what
they may see, and which mode answers.

Scope is the server's (the configuration's `retrieval.scope`), never the caller's: in thread
scope recall sees the asking thread only; in resource scope every thread of the asking thread's
resource, and nothing of another resource (a thread without a resource sees only itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .messages import Listing, browse, page_from_cursor, range_hint, read_part
from .params import RecallError, RecallParams
from .search_port import SearchPort, not_configured
from .source import RecallSource
from .threads import current_thread, list_threads

__all__ = ["Caller", "recall"]

MAX_TOP_K, DEFAULT_TOP_K = 20, 10


@dataclass(frozen=True)
class Caller:
    """The asking thread, its memory and resource, and the scope the tool was given."""

    thread_id: str
    resource_id: str | None
    memory_key: str
    scope: Literal["thread", "resource"] = "resource"

    @property
    def across_threads(self) -> bool:
        return self.scope == "resource" and self.resource_id is not None

    def visible_threads(self, source: RecallSource) -> list[str]:
        if not self.across_threads:
            return [self.thread_id]
        assert self.resource_id is not None
        others = [t.id for t in source.threads(self.resource_id) if t.id != self.thread_id]
        return [self.thread_id, *others]


async def recall(source: RecallSource, caller: Caller, params: RecallParams,
                 search: SearchPort | None = None) -> dict[str, Any]:
    """The answer to one recall call; `RecallError` for a call that cannot be answered as asked."""
    if params.mode == "search":
        if search is None:
            return not_configured()
        if not params.query:
            raise RecallError('query is required for mode="search"')
        top_k = min(max(params.limit or DEFAULT_TOP_K, 1), MAX_TOP_K)
        return await search.search(memory_key=caller.memory_key, thread_id=caller.thread_id,
                                   resource_id=caller.resource_id if caller.across_threads else None,
                                   query=params.query, top_k=top_k)
    if params.mode == "threads":
        if not caller.across_threads or params.thread_id == "current":
            return current_thread(source, caller.thread_id)
        assert caller.resource_id is not None
        return list_threads(source, caller.resource_id, caller.thread_id, page=params.page, limit=params.limit,
                            before=params.before, after=params.after)
    return _messages(source, caller, params)


def _target_thread(source: RecallSource, caller: Caller, asked: str | None) -> str:
    if asked is None or asked in ("current", caller.thread_id):
        return caller.thread_id
    if not caller.across_threads:
        raise RecallError("This recall tool is limited to the current thread: leave threadId out.")
    # One answer for a thread of another resource and one that does not exist: neither is seen.
    if asked not in caller.visible_threads(source):
        raise RecallError("Thread does not belong to the active resource")
    return asked


def _note(text: str, params: RecallParams) -> dict[str, Any]:
    """An answer of mode messages that only tells the agent what to do instead."""
    return {"messages": text, "count": 0, "cursor": params.cursor, "page": params.page or 1,
            "limit": min(params.limit or 20, 20), "detail": params.detail, "hasNextPage": False,
            "hasPrevPage": False, "truncated": False, "tokenOffset": 0}


def _messages(source: RecallSource, caller: Caller, params: RecallParams) -> dict[str, Any]:
    target = _target_thread(source, caller, params.thread_id)
    listing = Listing(params.detail, params.part_type, params.tool_name)
    if params.cursor is None:
        answer = browse(source, target, page=params.page, limit=params.limit, listing=listing, anchor=params.anchor)
        if params.thread_id is None and caller.across_threads:
            answer["messages"] = f"threadId wasn't passed so used default {target}.\n\n{answer['messages']}"
        return answer
    # An id is looked up first: ids may hold colons (`om produce` names lines `<thread>:<n>`).
    anchor = source.find(params.cursor.strip(), caller.visible_threads(source))
    if anchor is None:
        hint = range_hint(params.cursor)
        if hint is None or params.part_index is not None:
            raise RecallError(hint or f"Could not resolve cursor message: {params.cursor}")
        return _note(hint, params)
    if anchor.thread_id != target:
        return _note(f'Cursor does not belong to the active thread. Expected thread "{target}" but cursor '
                     f'"{params.cursor}" belongs to "{anchor.thread_id}". Pass threadId="{anchor.thread_id}" '
                     "to browse that thread.", params)
    if params.part_index is not None:
        return read_part(source, anchor, params.part_index, params.char_offset)
    return page_from_cursor(source, anchor, params.cursor, page=params.page, limit=params.limit, listing=listing)
