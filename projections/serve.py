"""`om serve`: the projection feed, the search index's feed and the HTTP server, until cancelled.

The application is `http/web.py`'s; this module binds its port, starts the feeds (the served
version's, and the search index's when `retrieval.vector` asks for it) and stops them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from omstream.crypto.sealing import Sealer, sealer_of
from omstream.schemas.errors import OmError
from omstream.settings import Settings

from .feed import ProjectionFeed
from .http.access import token_table
from .http.errors import AccessLog
from .http.web import build_web_app
from .store.store import open_store
from .versions import Versions

if TYPE_CHECKING:
    from .search.feed import SearchService

log = logging.getLogger("omstream.web")

__all__ = ["ListenError", "serve"]


class ListenError(OmError, OSError):
    """The server could not listen on the configured address; `in_use` when the port is taken."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        self.host, self.port = host, port
        self.in_use = cause.errno == errno.EADDRINUSE
        super().__init__(cause.errno, f"cannot listen on {host}:{port} ({cause.strerror or cause})")


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
    projection is kept in the data directory (projections/store/store.py): a restart loads it and
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
