"""Whether the server serves, and what: `GET /healthz` and `GET /openapi.json`, both public.

    GET /healthz        200 once the projection has read `<ns>.events` up to its end offsets at
                        start (503 before)
    GET /openapi.json   the OpenAPI 3.1 document of the routes: the committed
                        `schemas/openapi.json` (`projections/openapi.py` writes it)
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from aiohttp import web

from .access import public

if TYPE_CHECKING:
    from ..feed import ProjectionFeed

__all__ = ["OPENAPI_FILE", "committed_text", "status_routes"]

#: The committed document's name in the `omstream.schemas` package (shipped in the wheel).
OPENAPI_FILE = "openapi.json"


def committed_text() -> str:
    """The committed `schemas/openapi.json` as shipped (what `GET /openapi.json` serves)."""
    return (resources.files("omstream.schemas") / OPENAPI_FILE).read_text(encoding="utf-8")


def status_routes(feed: ProjectionFeed) -> web.RouteTableDef:
    """The routes of the served version's `feed`."""
    routes = web.RouteTableDef()
    openapi = committed_text().encode()  # read once: a wheel without it fails at start, not per request

    @routes.get("/healthz")
    @public
    async def health(_: web.Request) -> web.Response:
        # 503 until the feed has read the events that existed at start: a window served before
        # that could miss messages and observations the log already has.
        return web.json_response({"ok": feed.ready, "threads": len(feed.projection.threads)},
                                 status=200 if feed.ready else 503)

    @routes.get("/openapi.json")
    @public
    async def openapi_document(_: web.Request) -> web.Response:
        # Public like /healthz: it describes the routes and their errors, no data of any thread.
        return web.Response(body=openapi, content_type="application/json", charset="utf-8")

    return routes
