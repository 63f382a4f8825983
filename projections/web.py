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
        ?version=NAME  another memory version than the one served (its projection is built on
                       the first request, and followed from then on; 404 for no such version)
        ?asOf=SEQ      the window as it was right after the memory's event SEQ, folded from
                       the kept events (`projections/asof.py`); adds `asOf`, `lastSeq`,
                       `event` and `windows` (the token windows as of then)
    GET|POST /threads/{threadId}/recall   the recall tool (spec §12, `projections/recall/`)
    GET /openapi.json                     the OpenAPI 3.1 document of these routes (public; the
                                          committed `schemas/openapi.json`, `projections/openapi.py`)
    GET /  and  GET /threads/{threadId}   the dashboard (`projections/dashboard.py`)

The answer has `"stale": true` when the `after` position was not reached in time (the view is
then the current one).  Only records whose fold always emits an event reach their position by
themselves: accepted messages and steps (see `omstream.client`).

A blocked memory is the original's synchronous observation seen from the read side: the
request waits for the cycle to end instead of returning a window that is about to change.

Every error is JSON, `{"error": code, "detail": text}` (`projections/errors.py`).  With tokens
configured (required off loopback), every route but `/healthz`, `/openapi.json` and the dashboard's
pages needs one (`projections/access.py`):
401 without a known token, 403 for another resource's thread, and `/threads` lists only the
threads the token may read.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from omstream.api_tokens import TokenTable
from omstream.crypto.sealing import PLAIN, Sealer, sealer_of
from omstream.schemas.errors import OmError
from omstream.schemas.positions import LogPosition
from omstream.settings import Settings

from .access import NO_THREAD, access_middleware, filtered, grant_of, public, resource_of, token_table
from .asof import context_as_of, parse_seq
from .dashboard import dashboard_routes
from .errors import AccessLog, api_error, json_errors
from .feed import ProjectionFeed
from .openapi import committed_text
from .query_params import parse_log_position, parse_wait
from .recall.route import recall_routes
from .recall.search_port import SearchPort
from .sse import feed_routes
from .store import open_store

if TYPE_CHECKING:
    from .search.feed import SearchService

log = logging.getLogger("omstream.web")

__all__ = ["ListenError", "build_web_app", "serve"]


class ListenError(OmError, OSError):
    """The server could not listen on the configured address; `in_use` when the port is taken."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        self.host, self.port = host, port
        self.in_use = cause.errno == errno.EADDRINUSE
        super().__init__(cause.errno, f"cannot listen on {host}:{port} ({cause.strerror or cause})")


class Versions:
    """The projection of each version a reader asked for: the served one, and others built on
    their first request and followed from then on (`persistent`: each in its own store)."""

    def __init__(self, feed: ProjectionFeed, persistent: bool = False, sealer: Sealer = PLAIN) -> None:
        self.served = feed
        self.sealer = sealer  # every version's events are sealed with the namespace's keys
        self.persistent = persistent
        self._others: dict[str, tuple[ProjectionFeed, asyncio.Task[None]]] = {}
        self._lock = asyncio.Lock()

    async def feed(self, version: str | None) -> ProjectionFeed | None:
        """The version's projection, caught up with its events at least as of this call; None
        when the namespace has no such version."""
        from dataclasses import replace

        from omstream.topics import Topics, partitions_of

        settings = self.served.settings
        if version is None or version == settings.version:
            return self.served
        async with self._lock:
            if version not in self._others:
                other = replace(settings, version=version)
                topic = Topics.of(other).events
                if not (await partitions_of(settings.bootstrap, [topic])).get(topic):
                    return None
                feed = ProjectionFeed(other, store=open_store(other) if self.persistent else None,
                                      sealer=self.sealer)
                await feed.start()
                self._others[version] = (feed, asyncio.create_task(feed.run()))
        feed = self._others[version][0]
        await feed.wait_until(lambda: feed.ready, 60.0)
        return feed

    async def stop(self) -> None:
        for feed, task in self._others.values():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await feed.stop()


def as_of(feed: ProjectionFeed, thread_id: str, raw_seq: str) -> dict[str, Any]:
    """`?asOf=SEQ`: the window as it was after the memory's event `seq` (`projections/asof.py`)."""
    try:
        seq = parse_seq(raw_seq)
    except ValueError as exc:
        raise api_error(400, "bad-parameter", str(exc)) from None
    # The thread's memory (its resource's, in resource scope: known once the thread is).
    key = feed.memory_of(thread_id)
    answer = None if key is None else context_as_of(
        feed.history, key, thread_id, seq, feed.projection.time_zone, feed.projection.retrieval,
        resource=feed.projection.resource)
    if answer is None:
        raise api_error(404, "unknown-thread", f"unknown thread {thread_id!r}")
    return answer


def build_web_app(feed: ProjectionFeed, versions: Versions | None = None,
                  tokens: TokenTable | None = None, search: SearchPort | None = None) -> web.Application:
    """The read side's routes; with `tokens`, every route but `/healthz` checks the request's;
    `search` answers recall's `search` mode (without it, that mode says it is not configured)."""
    routes = web.RouteTableDef()
    versions = versions or Versions(feed)
    openapi = committed_text().encode()  # read once: a wheel without it fails at start, not per request

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

    def wait_of(request: web.Request) -> float:
        return parse_wait(request.query.get("wait"))

    def after_of(request: web.Request) -> LogPosition | None:
        return parse_log_position(request.query.get("after"))

    async def locate(request: web.Request, thread_id: str) -> object:
        """The thread's resource, for the access check; a reader of its own first write waits
        (`after=P:O`) for the thread to appear, as the context route would.  The parameters are
        the route's to judge (the feed's `after` is a seq): one that does not parse is ignored."""
        feed = await feed_of(request)
        try:
            after = after_of(request)
            wait = wait_of(request)
        except web.HTTPException:
            after = None
        if thread_id not in feed.projection.threads and after is not None:
            await feed.wait_until(lambda: thread_id in feed.projection.threads or feed.caught_up(*after), wait)
        view = feed.projection.threads.get(thread_id)
        return NO_THREAD if view is None else resource_of(view)

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

    @routes.get("/threads")
    @filtered
    async def threads(request: web.Request) -> web.Response:
        feed = await feed_of(request)
        grant = grant_of(request)
        return web.json_response({"threads": [
            {"threadId": v.thread_id, "messages": len(v.messages), "observed": len(v.observed),
             "generation": v.generation, "blocked": v.blocked, "title": v.title}
            for v in feed.projection.threads.values() if grant is None or grant.may_read(resource_of(v))
        ]})

    @routes.get("/threads/{thread_id}/context")
    async def context(request: web.Request) -> web.Response:
        feed = await feed_of(request)
        thread_id = request.match_info["thread_id"]
        if "asOf" in request.query:
            return web.json_response(as_of(feed, thread_id, request.query["asOf"]))
        wait, after = wait_of(request), after_of(request)
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

    # Errors outermost, so the access check's refusals are JSON too.
    middlewares = [json_errors] + ([access_middleware(tokens, locate)] if tokens is not None else [])
    app = web.Application(middlewares=middlewares)
    app.add_routes(routes)
    app.add_routes(feed_routes(feed_of))  # GET /threads/{threadId}/events, GET /events
    app.add_routes(recall_routes(feed_of, search))  # GET|POST /threads/{threadId}/recall
    app.add_routes(dashboard_routes(feed_of))  # GET /, /threads/{threadId}, /static/{name}, /dashboard/activity
    return app


async def _start_search(feed: ProjectionFeed, sealer: Sealer) -> SearchService | None:
    """The semantic search index, when the memory's `retrieval.vector` asks for it: its own
    consumer of the events, so a slow embedder never delays the context windows."""
    retrieval = feed.projection.retrieval
    if retrieval is None or not retrieval.vector:
        return None
    from .search.feed import start_search

    await sealer.start()  # the index feed opens events from its start on
    return await start_search(feed.settings, sealer=sealer)


async def _index(search: SearchService) -> None:
    """Run the index feed; one that fails (an embedder down) is restarted from its stored
    position after a pause, and recall's other modes and the context windows go on meanwhile."""
    while True:
        try:
            await search.feed.run()
            return
        except Exception:  # noqa: BLE001 - logged, and retried from the committed position
            log.exception("search index feed failed; restarting from its stored position in 5 s")
            await search.feed.stop()
            await asyncio.sleep(5)
            await search.feed.start()


async def serve(settings: Settings, on_ready: Callable[[str], None] | None = None) -> None:
    """Run the projection feed and the HTTP server until cancelled.

    The port is bound first, so a taken one fails before any broker round trip (`ListenError`);
    `on_ready(url)` is called once the server listens and the feed reads the topics.  The
    projection is kept in the data directory (projections/store.py): a restart loads it and
    reads on from where it stopped.  With a namespace key, a key ring (`sealer_of`, not
    repairing: the worker's ring repairs) opens every event the feeds read; it reads `<ns>.keys`
    after the port is bound (before, with semantic search: the index's feed starts first).
    """
    tokens = token_table(settings)  # refuses a network address without tokens, before anything
    sealer = sealer_of(settings, repair=False)  # PLAIN without a key; refuses a bad key before anything
    # The read model persists in the data directory: a restart reads only what is new.
    feed = ProjectionFeed(settings, store=open_store(settings), sealer=sealer)
    versions = Versions(feed, persistent=True, sealer=sealer)
    search: SearchService | None = None
    runner: web.AppRunner | None = None
    tasks: list[asyncio.Task[None]] = []
    try:
        search = await _start_search(feed, sealer)
        runner = web.AppRunner(build_web_app(feed, versions, tokens, search.search if search else None),
                               access_log_class=AccessLog)
        await runner.setup()
        site = web.TCPSite(runner, settings.web_host, settings.web_port)
        try:
            await site.start()
        except OSError as exc:
            raise ListenError(settings.web_host, settings.web_port, exc) from None
        if search is None:
            await sealer.start()  # reads <ns>.keys to its end: every live key is known before the feed
        await feed.start()
        tasks.append(asyncio.create_task(feed.run()))
        if search is not None:
            tasks.append(asyncio.create_task(_index(search)))
        if on_ready is not None:
            on_ready(f"http://{settings.web_host}:{settings.web_port}")
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if runner is not None:
            await runner.cleanup()
        await versions.stop()
        if search is not None:
            await search.close()
        await feed.stop()
        await sealer.stop()
