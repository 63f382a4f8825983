"""The live feed: a memory's events as Server-Sent Events in the AI SDK's UI message stream (v1).

    GET /threads/{threadId}/events   the thread's memory: replay, then live (in resource scope
                                     the events of its resource memory that concern it:
                                     `resource_views.concerns`)
        ?after=SEQ       resume after that `seq` (the `Last-Event-ID` header wins when both are
                         given: a browser's `EventSource` reconnects with it on the same URL)
        ?types=A,B       only these event types (`data-om-status`, `om-message-accepted` or
                         `data-om-message-accepted`, ...); the others are skipped, not renumbered
        ?follow=false    replay what is kept, then `data: [DONE]` and the end of the response
        ?version=NAME    another memory version, as on the context route
    GET /events          every memory of the namespace, for operators: live from the moment of
                         the request (no replay; with `follow=false`, every kept event, memory
                         after memory, then `[DONE]`); same `types`, `version`

Each event is one frame, `id: <seq>` then `data: <part>` (`omstream.projections.views.parts`: four
keys, `type`, `id`, `data`, `transient`), `\\n` separators; on `/events` the SSE id is
`<memoryKey>:<seq>`, so an operator who missed events of one memory reads them from its thread's
feed with `after=seq`.  The SSE id is the memory's `seq`, dense per memory, so a client that
resumes after the last id it saw loses nothing and gets nothing twice: the handler subscribes
first, replays the history after that `seq`, drops live events it already replayed, then
follows.  A comment (`: ping`) every 15 s keeps proxies from closing an idle feed.  A client
that falls `queue_size` events behind is disconnected (its queue is bounded and never waited
on), so it cannot slow the projection or other clients; it resumes with its last id.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response

from omstream.schemas.events import EVENT_TYPES

from ..feed import ProjectionFeed
from ..views.history import EventHistory, HistoryEntry, Subscription
from ..views.parts import event_type
from ..views.resource_views import concerns, is_resource_key
from .errors import api_error

__all__ = ["FEED_OPTIONS", "HEADERS", "FeedOptions", "feed_routes"]

#: The AI SDK's stream marker; aiohttp-sse adds content-type, cache-control and x-accel-buffering.
HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}


@dataclass(frozen=True)
class FeedOptions:
    ping_interval: float = 15.0   # seconds between `: ping` comments
    queue_size: int = 1000        # live events a client may fall behind before it is dropped
    send_timeout: float = 30.0    # a write that takes longer aborts the connection


FEED_OPTIONS = web.AppKey("om-feed-options", FeedOptions)


def _types(request: web.Request) -> frozenset[str] | None:
    raw = request.query.get("types")
    if not raw:
        return None
    wanted = frozenset(event_type(t.strip()) for t in raw.split(",") if t.strip())
    unknown = sorted(wanted - set(EVENT_TYPES))
    if unknown:
        raise api_error(400, "bad-parameter", f"unknown event types: {', '.join(unknown)}")
    return wanted


def _follow(request: web.Request) -> bool:
    value = request.query.get("follow", "true").lower()
    if value not in ("true", "false", "1", "0"):
        raise api_error(400, "bad-parameter", "follow must be true or false")
    return value in ("true", "1")


def _after(request: web.Request) -> int:
    # A header that is there is read, even empty: a browser sends it only with an id, so an
    # empty one is a client's mistake to report rather than a replay from the start.
    raw = request.headers.get("Last-Event-ID", request.query.get("after", "0"))
    if not (raw.isascii() and raw.isdigit()):  # int() would also take " 7", "+7" and "7_0"
        raise api_error(400, "bad-parameter", f"after / Last-Event-ID must be a seq (a non-negative integer), "
                                              f"not {raw!r}")
    return int(raw)


async def _stream(request: web.Request, history: EventHistory, key: str | None, after: int,
                  wanted: Callable[[HistoryEntry], bool], follow: bool,
                  sse_id: Callable[[HistoryEntry], str]) -> EventSourceResponse:
    options = request.app.get(FEED_OPTIONS) or FeedOptions()
    # Subscribed before the replay is read: an event applied in between is in both, and its
    # seq drops the second copy; nothing can fall between the two.
    subscription = history.subscribe(key, options.queue_size)
    try:
        async with sse_response(request, sep="\n", headers=HEADERS, ping_interval=options.ping_interval,
                                send_timeout=options.send_timeout) as response:
            with contextlib.suppress(ConnectionResetError, TimeoutError):  # the client went away
                await _pump(response, history, subscription, key, after, wanted, follow, sse_id)
        return response
    finally:
        history.unsubscribe(subscription)


async def _pump(response: EventSourceResponse, history: EventHistory, subscription: Subscription,
                key: str | None, after: int, wanted: Callable[[HistoryEntry], bool], follow: bool,
                sse_id: Callable[[HistoryEntry], str]) -> None:
    sent: dict[str, int] = {}  # memory key -> last seq sent (or skipped by the filter)

    async def send(entry: HistoryEntry) -> None:
        if entry.seq <= sent.get(entry.memory_key, after if key else 0):
            return
        sent[entry.memory_key] = entry.seq
        if wanted(entry):
            await response.send(entry.frame, id=sse_id(entry))

    if key is not None:
        for entry in history.since(key, after):
            await send(entry)
    elif not follow:
        for memory in history.memories():
            for entry in history.since(memory):
                await send(entry)
    if not follow:
        await response.send("[DONE]")
        return
    closed = asyncio.ensure_future(response.wait())
    try:
        while not subscription.overflowed.is_set():
            if subscription.queue.empty():
                getter = asyncio.ensure_future(subscription.queue.get())
                await asyncio.wait([getter, closed], return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    return  # the client went away (a ping could not be written)
                entry = getter.result()
            else:
                entry = subscription.queue.get_nowait()
            if subscription.overflowed.is_set():
                return  # too slow: dropped; it resumes with its last id
            await send(entry)
    finally:
        closed.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closed


def feed_routes(feed_of: Callable[[web.Request], Awaitable[ProjectionFeed]]) -> web.RouteTableDef:
    """The feed's routes; `feed_of(request)` picks the projection (`?version=`)."""
    routes = web.RouteTableDef()

    @routes.get("/threads/{thread_id}/events")
    async def thread_events(request: web.Request) -> web.StreamResponse:
        types, follow, after = _types(request), _follow(request), _after(request)
        feed = await feed_of(request)
        thread_id = request.match_info["thread_id"]
        key = feed.memory_of(thread_id)
        if key is None:
            raise api_error(404, "unknown-thread", f"unknown thread {thread_id!r} (in resource scope a thread is "
                                                   "known from its first message)")
        # A resource memory's feed is shared by its threads: each sees what concerns it.
        mine = is_resource_key(key)
        response: web.StreamResponse = await _stream(
            request, feed.history, key, after,
            lambda e: (types is None or e.type in types) and (not mine or concerns(e.event, thread_id)),
            follow, lambda e: str(e.seq))
        return response

    @routes.get("/events")
    async def all_events(request: web.Request) -> web.StreamResponse:
        types, follow = _types(request), _follow(request)
        feed = await feed_of(request)
        response: web.StreamResponse = await _stream(request, feed.history, None, 0,
                                                     lambda e: types is None or e.type in types, follow,
                                                     lambda e: f"{e.memory_key}:{e.seq}")
        return response

    return routes
