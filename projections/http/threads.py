"""The threads and their context windows.

    GET /threads                          threads known to the projection (those the token may
                                          read)
    GET /threads/{threadId}/context       observations + unobserved messages (JSON); `?after=`,
                                          `?wait=`, `?version=`, `?asOf=` (projections/http/web.py)

The answer has `"stale": true` when the `after` position was not reached in time (the view is
then the current one).  A blocked memory is the original's synchronous observation seen from
the read side: the request waits for the cycle to end instead of returning a window that is
about to change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..views.asof import context_as_of, parse_seq
from .access import filtered, grant_of
from .errors import api_error
from .query_params import parse_log_position, parse_wait

if TYPE_CHECKING:
    from ..feed import ProjectionFeed

__all__ = ["as_of", "thread_routes"]


def as_of(feed: ProjectionFeed, thread_id: str, raw_seq: str) -> dict[str, Any]:
    """`?asOf=SEQ`: the window as it was after the memory's event `seq` (`projections/views/asof.py`)."""
    try:
        seq = parse_seq(raw_seq)
    except ValueError as exc:
        raise api_error(400, "bad-parameter", str(exc)) from None
    # The thread's memory (its resource's, in resource scope: known once the thread is).
    key = feed.memory_of(thread_id)
    answer = None if key is None else context_as_of(
        feed.history, key, thread_id, seq, feed.projection.time_zone, feed.projection.retrieval,
        resource=feed.projection.resource, working_memory=feed.projection.working_memory)
    if answer is None:
        raise api_error(404, "unknown-thread", f"unknown thread {thread_id!r}")
    return answer


def thread_routes(feed_of: Callable[[web.Request], Awaitable[ProjectionFeed]]) -> web.RouteTableDef:
    """The routes; `feed_of(request)` is the projection of the version the request asks for."""
    routes = web.RouteTableDef()

    @routes.get("/threads")
    @filtered
    async def threads(request: web.Request) -> web.Response:
        feed = await feed_of(request)
        grant = grant_of(request)
        return web.json_response({"threads": [
            {"threadId": v.thread_id, "messages": len(v.messages), "observed": len(v.observed),
             "generation": v.generation, "blocked": v.blocked, "held": v.held["count"] if v.held else 0,
             "title": v.title}
            for v in feed.projection.threads.values() if grant is None or grant.may_read(v.resource_id)
        ]})

    @routes.get("/threads/{thread_id}/context")
    async def context(request: web.Request) -> web.Response:
        feed = await feed_of(request)
        thread_id = request.match_info["thread_id"]
        if "asOf" in request.query:
            return web.json_response(as_of(feed, thread_id, request.query["asOf"]))
        wait, after = parse_wait(request.query.get("wait")), parse_log_position(request.query.get("after"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        stale = False
        if after is not None:
            stale = not await feed.wait_until(lambda: feed.caught_up(*after), wait)
        if thread_id not in feed.projection.threads:
            raise api_error(404, "unknown-thread", f"unknown thread {thread_id!r}")
        view = feed.projection.view(thread_id)
        left = deadline - loop.time()
        if view.blocked and left > 0:
            await feed.wait_until(lambda: not view.blocked, left)
        return web.json_response({**feed.projection.snapshot(thread_id), "stale": stale})

    return routes
