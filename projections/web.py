"""HTTP read side: context windows per thread (`om serve`).

    GET /healthz
    GET /threads                          threads known to the projection
    GET /threads/{threadId}/context       observations + unobserved messages (JSON)
        ?wait=SECONDS  while a blocking observation is in flight, wait up to this long (10)

A blocked memory is the original's synchronous observation seen from the read side: the
request waits for the cycle to end instead of returning a window that is about to change.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from omstream.settings import Settings

from .feed import ProjectionFeed

__all__ = ["build_web_app", "serve"]


def build_web_app(feed: ProjectionFeed) -> web.Application:
    routes = web.RouteTableDef()

    @routes.get("/healthz")
    async def health(_: web.Request) -> web.Response:
        return web.json_response({"ok": True, "threads": len(feed.projection.threads)})

    @routes.get("/threads")
    async def threads(_: web.Request) -> web.Response:
        return web.json_response({"threads": [
            {"threadId": v.thread_id, "messages": len(v.messages), "observed": len(v.observed),
             "generation": v.generation, "blocked": v.blocked}
            for v in feed.projection.threads.values()
        ]})

    @routes.get("/threads/{thread_id}/context")
    async def context(request: web.Request) -> web.Response:
        thread_id = request.match_info["thread_id"]
        try:
            wait = float(request.query.get("wait", "10"))
        except ValueError:
            raise web.HTTPBadRequest(text="wait must be a number of seconds")
        if thread_id not in feed.projection.threads:
            raise web.HTTPNotFound(text=f"unknown thread {thread_id!r}")
        view = feed.projection.view(thread_id)
        if view.blocked and wait > 0:
            await feed.wait_until(lambda: not view.blocked, min(wait, 300.0))
        return web.json_response(view.snapshot())

    app = web.Application()
    app.add_routes(routes)
    return app


async def serve(settings: Settings) -> None:
    """Run the projection feed and the HTTP server until cancelled."""
    feed = ProjectionFeed(settings)
    await feed.start()
    task = asyncio.create_task(feed.run())
    runner = web.AppRunner(build_web_app(feed))
    await runner.setup()
    site = web.TCPSite(runner, settings.web_host, settings.web_port)
    await site.start()
    try:
        await task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await runner.cleanup()
        await feed.stop()
