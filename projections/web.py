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
import errno
from collections.abc import Callable

from aiohttp import web

from omstream.settings import Settings

from .feed import ProjectionFeed

__all__ = ["ListenError", "build_web_app", "serve"]


class ListenError(OSError):
    """The server could not listen on the configured address; `in_use` when the port is taken."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        self.host, self.port = host, port
        self.in_use = cause.errno == errno.EADDRINUSE
        super().__init__(cause.errno, f"cannot listen on {host}:{port} ({cause.strerror or cause})")


def build_web_app(feed: ProjectionFeed) -> web.Application:
    routes = web.RouteTableDef()

    @routes.get("/healthz")
    async def health(_: web.Request) -> web.Response:
        # 503 until the feed reads the topics: a window served before that would be empty.
        return web.json_response({"ok": feed.ready, "threads": len(feed.projection.threads)},
                                 status=200 if feed.ready else 503)

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


async def serve(settings: Settings, on_ready: Callable[[str], None] | None = None) -> None:
    """Run the projection feed and the HTTP server until cancelled.

    The port is bound first, so a taken one fails before any broker round trip (`ListenError`);
    `on_ready(url)` is called once the server listens and the feed reads the topics.
    """
    feed = ProjectionFeed(settings)
    runner = web.AppRunner(build_web_app(feed))
    await runner.setup()
    task: asyncio.Task | None = None
    try:
        site = web.TCPSite(runner, settings.web_host, settings.web_port)
        try:
            await site.start()
        except OSError as exc:
            raise ListenError(settings.web_host, settings.web_port, exc) from None
        await feed.start()
        task = asyncio.create_task(feed.run())
        if on_ready is not None:
            on_ready(f"http://{settings.web_host}:{settings.web_port}")
        await task
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await runner.cleanup()
        await feed.stop()
