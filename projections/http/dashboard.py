"""The dashboard: plain HTML, CSS and JavaScript shipped in the package (`static/`), no build step.

    GET /                        the thread list (live)
    GET /threads/{threadId}      one memory: token windows, cycles, observations, timeline
    GET /static/{name}           the pages' scripts and style sheet
    GET /dashboard/activity      what each memory is doing now (`projections/views/activity.py`): the
                                 cycles in flight (label, wall-clock start), the buffered figures;
                                 every thread the token may read, or `?threadId=` one of them

Both pages show the live figures of `/dashboard/activity`, so they never disagree: the list's
state column and the thread page's badges, its elapsed times and its Buffered card.

The pages themselves are public: they hold no data.  Everything they show comes from the data
routes (`/threads`, `/threads/{id}/context`, the SSE feeds), which check the token as any client's
request; a page opened with `?access_token=` passes it on to them (`static/common.js`), since a
browser's `EventSource` cannot send an `Authorization` header.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..views.activity import ActivityIndex, MemoryActivity
from .access import filtered, grant_of, public

if TYPE_CHECKING:
    from ..feed import ProjectionFeed

__all__ = ["STATIC", "dashboard_routes"]

#: Served files by name: only these, so no request path can reach anything else.
STATIC = {
    "dashboard.css": "text/css",
    "common.js": "text/javascript",
    "threads.js": "text/javascript",
    "thread.js": "text/javascript",
    "timeline.js": "text/javascript",
    "observations.js": "text/javascript",
}
PAGES = ("index.html", "thread.html")


def _read(name: str) -> bytes:
    return (resources.files("omstream.projections") / "static" / name).read_bytes()


def _page(name: str) -> web.Response:
    # no-cache: a page served by a newer `om serve` must not run an older cached script.
    return web.Response(body=_read(name), content_type="text/html", charset="utf-8",
                        headers={"Cache-Control": "no-cache"})


def dashboard_routes(feed_of: Callable[[web.Request], Awaitable[ProjectionFeed]] | None = None) -> web.RouteTableDef:
    """The pages, their files and (given `feed_of`, the version's feed of a request) their data."""
    routes = web.RouteTableDef()
    indexes: dict[int, tuple[ProjectionFeed, ActivityIndex]] = {}  # by feed: one per version served

    def index_of(feed: ProjectionFeed) -> ActivityIndex:
        found = indexes.get(id(feed))
        if found is None or found[0] is not feed:
            found = indexes[id(feed)] = (feed, ActivityIndex(feed.history))
        return found[1]

    if feed_of is not None:
        @routes.get("/dashboard/activity")
        @filtered
        async def activity(request: web.Request) -> web.Response:
            feed = await feed_of(request)
            grant, only = grant_of(request), request.query.get("threadId")
            index = index_of(feed)
            threads: dict[str, Any] = {}
            for view in list(feed.projection.threads.values()):
                if only is not None and view.thread_id != only:
                    continue
                if grant is not None and not grant.may_read(view.resource_id):
                    continue
                # A thread known before any event of its memory: nothing in flight.
                figures = index.of(view.memory_key) if view.memory_key else MemoryActivity()
                threads[view.thread_id] = figures.answer()
            return web.json_response({"threads": threads})

    @routes.get("/")
    @public
    async def index(_: web.Request) -> web.Response:
        return _page("index.html")

    @routes.get("/threads/{thread_id}")
    @public
    async def thread(_: web.Request) -> web.Response:
        return _page("thread.html")

    @routes.get("/static/{name}")
    @public
    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound(text=f"no such file: {name}")
        return web.Response(body=_read(name), content_type=STATIC[name], charset="utf-8",
                            headers={"Cache-Control": "no-cache"})

    return routes
