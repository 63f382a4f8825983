"""HTTP read side: the application `om serve` runs (`projections/serve.py`), assembled from
the route modules of this folder.

    GET /healthz                          200 once the projection has read `<ns>.events` up
                                          to its end offsets at start (503 before)
    GET /threads                          threads known to the projection
    GET /threads/{threadId}/context       observations + unobserved messages (JSON)
        ?after=PARTITION:OFFSET  first wait until the projection has applied an event caused by
                       that record of `<ns>.log` (or a later one of its partition): the agent
                       reads its own writes.  `OmClient` sends return these positions.
        ?wait=SECONDS  how long to wait, for `after` and while a blocking observation is in
                       flight (10)
        ?version=NAME  another memory version than the one served (its projection is built on
                       the first request, and followed from then on; 404 for no such version)
        ?asOf=SEQ      the window as it was right after the memory's event SEQ, folded from
                       the kept events (`projections/views/asof.py`); adds `asOf`, `lastSeq`,
                       `event` and `windows` (the token windows as of then)
    GET|POST /threads/{threadId}/recall   the recall tool (spec §12, `projections/recall/`)
    GET /openapi.json                     the OpenAPI 3.1 document of these routes (public; the
                                          committed `schemas/openapi.json`, `projections/openapi.py`)
    GET /threads/{threadId}/events, GET /events   the live feed (SSE, `http/sse.py`)
    GET /  and  GET /threads/{threadId}   the dashboard (`http/dashboard.py`)

`/healthz` and `/openapi.json` are `http/status.py`'s, `/threads` and the context `http/threads.py`'s,
recall `http/recall.py`'s.

The answer has `"stale": true` when the `after` position was not reached in time (the view is
then the current one).  Only records whose fold always emits an event reach their position by
themselves: accepted messages and steps (see `omstream.client`).

A blocked memory is the original's synchronous observation seen from the read side: the
request waits for the cycle to end instead of returning a window that is about to change.

Every error is JSON, `{"error": code, "detail": text}` (`http/errors.py`).  With tokens
configured (required off loopback), every route but `/healthz`, `/openapi.json` and the dashboard's
pages needs one (`http/access.py`):
401 without a known token, 403 for another resource's thread, and `/threads` lists only the
threads the token may read.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from omstream.api_tokens import TokenTable

from ..versions import Versions
from .access import NO_THREAD, access_middleware
from .dashboard import dashboard_routes
from .errors import api_error, json_errors
from .query_params import parse_log_position, parse_wait
from .recall import recall_routes
from .sse import feed_routes
from .status import status_routes
from .threads import thread_routes

if TYPE_CHECKING:
    from ..feed import ProjectionFeed
    from ..recall.search_port import SearchPort

log = logging.getLogger("omstream.web")

__all__ = ["build_web_app"]


def build_web_app(feed: ProjectionFeed, versions: Versions | None = None,
                  tokens: TokenTable | None = None, search: SearchPort | None = None) -> web.Application:
    """The read side's routes; with `tokens`, every route but `/healthz` checks the request's;
    `search` answers recall's `search` mode (without it, that mode says it is not configured)."""
    versions = versions or Versions(feed)

    async def feed_of(request: web.Request) -> ProjectionFeed:
        from omstream.settings import VERSION_NAME

        name = request.query.get("version")
        if name is not None and not VERSION_NAME.fullmatch(name):
            raise api_error(400, "bad-parameter", f"no such version name: {name!r}")
        from aiokafka.errors import KafkaError  # here: the read side loads no Kafka client until it reads

        try:
            chosen = await versions.feed(name)
        except (KafkaError, OSError, TimeoutError) as exc:  # another version is opened on the broker
            log.warning("version not opened: the broker cannot be reached",
                        extra={"version": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
            raise api_error(503, "unavailable", f"version {name!r} cannot be opened now: the broker cannot be "
                            "reached; try again", headers={"Retry-After": "5"}) from None
        if chosen is None:
            raise api_error(404, "unknown-version", f"unknown version {name!r}")
        return chosen

    async def locate(request: web.Request, thread_id: str) -> object:
        """The thread's resource, for the access check; a reader of its own first write waits
        (`after=P:O`) for the thread to appear, as the context route would.  The parameters are
        the route's to judge (the feed's `after` is a seq): one that does not parse is ignored."""
        feed = await feed_of(request)
        try:
            after = parse_log_position(request.query.get("after"))
            wait = parse_wait(request.query.get("wait"))
        except web.HTTPException:
            after = None
        if thread_id not in feed.projection.threads and after is not None:
            await feed.wait_until(lambda: thread_id in feed.projection.threads or feed.caught_up(*after), wait)
        view = feed.projection.threads.get(thread_id)
        return NO_THREAD if view is None else view.resource_id

    # Errors outermost, so the access check's refusals are JSON too.
    middlewares = [json_errors] + ([access_middleware(tokens, locate)] if tokens is not None else [])
    app = web.Application(middlewares=middlewares)
    app.add_routes(status_routes(feed))  # GET /healthz, /openapi.json
    app.add_routes(thread_routes(feed_of))  # GET /threads, /threads/{threadId}/context
    app.add_routes(feed_routes(feed_of))  # GET /threads/{threadId}/events, GET /events
    app.add_routes(recall_routes(feed_of, search))  # GET|POST /threads/{threadId}/recall
    app.add_routes(dashboard_routes(feed_of))  # GET /, /threads/{threadId}, /static/{name}, /dashboard/activity
    return app
