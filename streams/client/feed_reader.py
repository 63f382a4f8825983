"""Reading the live feed of `om serve` (`GET /threads/{threadId}/events`) as typed events.

The feed is Server-Sent Events; each frame is an AI SDK data part (`DataPart`: type, id, data,
transient) whose SSE id is the memory's `seq`.  `follow_feed` parses the frames, validates each
part and its `data` against the schemas, and reconnects after a dropped connection with
`Last-Event-ID` set to the last `seq` it yielded, so the caller sees every event once, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from omstream.schemas.errors import OmError
from omstream.schemas.events import EVENT_TYPES
from omstream.schemas.parts import DataPart

__all__ = ["FeedError", "FeedEvent", "follow_feed", "sse_frames"]


class FeedError(OmError):
    """The feed answered with an error, or stayed unreachable after the retries."""


@dataclass(frozen=True)
class FeedEvent:
    """One event of a memory's feed: its `seq`, its type on `<ns>.events`, the part's id and
    `transient`, and `data` as the event's typed model (`StatusData`, `ObservationEndData`, ...)."""

    seq: int
    type: str
    id: str
    transient: bool
    data: Any
    part: DataPart

    @classmethod
    def of(cls, seq: int, part: DataPart) -> FeedEvent:
        kind = part.type if part.type in EVENT_TYPES else part.type.removeprefix("data-")
        model = EVENT_TYPES.get(kind)
        if model is None:
            raise FeedError(f"unknown event type {part.type!r} on the feed")
        data_model = model.model_fields["data"].annotation
        assert data_model is not None
        return cls(seq, kind, part.id, part.transient, data_model.model_validate(part.data), part)


async def sse_frames(lines: AsyncIterable[bytes]) -> AsyncIterator[tuple[str | None, str]]:
    """(SSE id, data) of each frame; comments and other fields are skipped."""
    frame_id: str | None = None
    data: list[str] = []
    async for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield frame_id, "\n".join(data)
            frame_id, data = None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "id":
            frame_id = value
    if data:
        yield frame_id, "\n".join(data)


async def follow_feed(url: str, *, after: int | None = None, types: Iterable[str] | None = None,
                      version: str | None = None, follow: bool = True, retry_delay: float = 1.0,
                      retries: int = 10, idle_timeout: float = 60.0,
                      token: str | None = None) -> AsyncIterator[FeedEvent]:
    """The events of the feed at `url`, after `after`; with `follow` forever (reconnecting),
    without it until the server's `[DONE]`.  `retries` consecutive failed connections raise
    `FeedError`; a connection that gave events resets the count.  `token`: the bearer token
    shown to a server that has tokens."""
    import aiohttp

    params = {"follow": "true" if follow else "false"}
    if types:
        params["types"] = ",".join(types)
    if version is not None:
        params["version"] = version
    last, failures = after, 0
    # sock_read: pings come every 15 s, so a silent connection for longer is a dead one.
    timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_read=idle_timeout)
    shown = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession(timeout=timeout, headers=shown) as http:
        while True:
            headers = {"Last-Event-ID": str(last)} if last is not None else {}
            try:
                async with http.get(url, params=params, headers=headers) as response:
                    if response.status >= 400:
                        raise FeedError(f"{url}: HTTP {response.status} {(await response.text())[:300]}")
                    async for frame_id, data in sse_frames(response.content):
                        if data == "[DONE]":
                            return
                        event = FeedEvent.of(int(frame_id or 0), DataPart.model_validate_json(data))
                        if last is not None and event.seq <= last:
                            continue  # never twice, whatever the server does
                        last, failures = event.seq, 0
                        yield event
                if not follow:
                    return
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                failures += 1
                if failures > retries:
                    raise FeedError(f"{url}: feed unreachable after {retries} retries ({exc})") from exc
            await asyncio.sleep(retry_delay)
