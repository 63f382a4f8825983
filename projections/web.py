"""HTTP read side: context windows per thread (`om serve`).

    GET /healthz                          200 once the projection has read `<ns>.events` up
                                          to its end offsets at start (503 before)
    GET /threads                          threads known to the projection
    GET /threads/{threadId}/context       observations + unobserved messages (JSON)
        ?after=PARTITION:OFFSET  first wait until the projection has applied an event caused by
                       that record of `<ns>.log` (or a later one of its partition): the agent
                       reads its own writes.  `OmClient` sends return these positions.
        ?wait=SECONDS  how long to wait, for `after` and while a blocking observation is in
                       flight (10)

The answer has `"stale": true` when the `after` position was not reached in time (the view is
then the current one).  Only records whose fold always emits an event reach their position by
themselves: accepted messages and steps (see `omstream.client`).

A blocked memory is the original's synchronous observation seen from the read side: the
request waits for the cycle to end instead of returning a window that is about to change.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Callable

from aiohttp import web

from omstream.client import LogPosition
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
        # 503 until the feed has read the events that existed at start: a window served before
        # that could miss messages and observations the log already has.
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
            wait = min(max(float(request.query.get("wait", "10")), 0.0), 300.0)
        except ValueError:
            raise web.HTTPBadRequest(text="wait must be a number of seconds")
        try:
            after = LogPosition.parse(request.query["after"]) if "after" in request.query else None
        except ValueError as exc:
            raise web.HTTPBadRequest(text=str(exc))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        stale = False
        if after is not None:
            stale = not await feed.wait_until(lambda: feed.caught_up(*after), wait)
        if thread_id not in feed.projection.threads:
            raise web.HTTPNotFound(text=f"unknown thread {thread_id!r}")
        view = feed.projection.view(thread_id)
        left = deadline - loop.time()
        if view.blocked and left > 0:
            await feed.wait_until(lambda: not view.blocked, left)
        return web.json_response({**view.snapshot(), "stale": stale})

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
