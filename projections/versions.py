"""The projection of each memory version a reader asks for (`?version=NAME`)."""

from __future__ import annotations

import asyncio
import contextlib

from omstream.crypto.sealing import PLAIN, Sealer

from .feed import ProjectionFeed
from .store.store import open_store

__all__ = ["Versions"]


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
