"""The AI SDK's data part: how one event of `<ns>.events` travels on the HTTP feed.

`GET /threads/{threadId}/events` sends each event as one `data:` frame of the AI SDK's UI
message stream (v1), `{"type": "data-om-…", "id": …, "data": {…}, "transient": …}`: those four
keys and no other (some releases of the SDK validate a part strictly).  `data` is the event's
`data` object exactly as it is on `<ns>.events`; the envelope's `seq` is on the SSE `id:` line.
`schemas/json/data-part.json` is this shape as a JSON Schema, for clients in other languages.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .base import WireModel

__all__ = ["DataPart", "part_type"]


def part_type(event_type: str) -> str:
    """The part's `type` for an event type: `data-` before omstream's own (`om-...`) events."""
    return event_type if event_type.startswith("data-") else f"data-{event_type}"


class DataPart(WireModel):
    """One `data-om-*` part of the feed (the AI SDK's `DataUIPart` as streamed)."""

    type: str = Field(pattern=r"^data-om-[a-z-]+$")
    """`data-` and the event's type (`data-om-status`; `om-message-accepted` becomes
    `data-om-message-accepted`)."""
    id: str
    """For reconciliation: a later non-transient part with the same type and id replaces the
    earlier one (`om-status` for every status, the cycle id for cycle markers)."""
    data: dict[str, Any]
    """The event's fields, camelCase, exactly as in the event's `data` on `<ns>.events`: they
    validate against `properties.data` of that event type's schema (`data-om-status.json`,
    `om-message-accepted.json`, ...)."""
    transient: bool
    """True for parts a client should not keep in message history (status, accepted messages,
    ignored results): they reach `onData` only."""
