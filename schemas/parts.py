"""The AI SDK's data part: how one event of `<ns>.events` travels on the HTTP feed.

`GET /threads/{threadId}/events` sends each event as one `data:` frame of the AI SDK's UI
message stream (v1), `{"type": "data-om-…", "id": …, "data": {…}, "transient": …}`: those four
keys and no other (some releases of the SDK validate a part strictly).  `data` is the event's
`data` object exactly as it is on `<ns>.events`; the envelope's `seq` is on the SSE `id:` line.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .base import WireModel

__all__ = ["DataPart"]


class DataPart(WireModel):
    """One `data-om-*` part of the feed (the AI SDK's `DataUIPart` as streamed)."""

    type: str = Field(pattern=r"^data-om-[a-z-]+$")
    """`data-` and the event's type (`data-om-status`; `om-message-accepted` becomes
    `data-om-message-accepted`)."""
    id: str
    """For reconciliation: a later non-transient part with the same type and id replaces the
    earlier one (`om-status` for every status, the cycle id for cycle markers)."""
    data: dict[str, Any]
    """The event's fields, camelCase, exactly as in the event's `data` on `<ns>.events`."""
    transient: bool
    """True for parts a client should not keep in message history (status, accepted messages,
    ignored results): they reach `onData` only."""
