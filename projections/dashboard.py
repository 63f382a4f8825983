"""The dashboard: plain HTML, CSS and JavaScript shipped in the package (`static/`), no build step.

    GET /                        the thread list (live)
    GET /threads/{threadId}      one memory: token windows, cycles, observations, timeline
    GET /static/{name}           the pages' scripts and style sheet

The pages themselves are public: they hold no data.  Everything they show comes from the data
routes (`/threads`, `/threads/{id}/context`, the SSE feeds), which check the token as any client's
request; a page opened with `?access_token=` passes it on to them (`static/common.js`), since a
browser's `EventSource` cannot send an `Authorization` header.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from .access import public

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


def dashboard_routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()

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
