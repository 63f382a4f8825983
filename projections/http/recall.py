"""`GET|POST /threads/{threadId}/recall` on `om serve`: the recall tool over HTTP.

The parameters are the tool's (camelCase), in the query string, or (POST) in a JSON object body,
which wins over the query; `?version=`, `?after=P:O` and `?wait=` work as on the context route.
The thread in the path is the asking one: the access middleware has already checked that the
token may read its resource, and resource-scoped recall stays within that resource.  A bad
parameter, or a cursor or thread recall cannot see, is a 400 `bad-parameter` whose detail is
the sentence the tool would give the agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from omstream.engine.rules.tokens import get_counter
from omstream.schemas.keys import memory_key

from ..feed import ProjectionFeed
from ..recall.params import RecallError, parse_params
from ..recall.search_port import SearchPort
from ..recall.source import RecallSource
from ..recall.tool import Caller, recall
from .errors import api_error
from .query_params import parse_log_position, parse_wait

__all__ = ["recall_routes"]

#: Query keys that belong to the route, not to the tool.
_ROUTE_KEYS = ("version", "access_token", "after", "wait")


async def _raw_params(request: web.Request) -> dict[str, Any]:
    raw: dict[str, Any] = {k: v for k, v in request.query.items() if k not in _ROUTE_KEYS}
    if request.method == "POST" and request.can_read_body:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            raise api_error(400, "bad-parameter", "the body must be a JSON object of recall parameters") from None
        if not isinstance(body, dict):
            raise api_error(400, "bad-parameter", "the body must be a JSON object of recall parameters")
        raw.update(body)
    return raw


def recall_routes(feed_of: Callable[[web.Request], Awaitable[ProjectionFeed]],
                  search: SearchPort | None = None) -> web.RouteTableDef:
    routes = web.RouteTableDef()
    sources: dict[int, RecallSource] = {}

    def source_of(feed: ProjectionFeed) -> RecallSource:
        if id(feed) not in sources:
            sources[id(feed)] = RecallSource(feed.projection, get_counter(feed.settings.om.token_counter))
        return sources[id(feed)]

    async def answer(request: web.Request) -> web.Response:
        feed = await feed_of(request)
        thread_id = request.match_info["thread_id"]
        try:
            params = parse_params(await _raw_params(request))
        except RecallError as exc:
            raise api_error(400, "bad-parameter", str(exc)) from None
        after, wait = parse_log_position(request.query.get("after")), parse_wait(request.query.get("wait"))
        if after is not None:
            await feed.wait_until(lambda: feed.caught_up(*after), wait)
        view = feed.projection.threads.get(thread_id)
        if view is None:
            raise api_error(404, "unknown-thread", f"unknown thread {thread_id!r}")
        retrieval = feed.projection.retrieval
        caller = Caller(thread_id, view.resource_id,
                        view.memory_key or memory_key(feed.settings.om, thread_id, None),
                        retrieval.scope if retrieval is not None else "thread")
        try:
            result = await recall(source_of(feed), caller, params,
                                  search if retrieval is not None and retrieval.vector else None)
        except RecallError as exc:
            raise api_error(400, "bad-parameter", str(exc)) from None
        return web.json_response(result)

    routes.get("/threads/{thread_id}/recall")(answer)
    routes.post("/threads/{thread_id}/recall")(answer)
    return routes
