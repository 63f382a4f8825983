"""Events of `<ns>.events` as the AI SDK's data parts (the frames of the feed).

    type       `data-` + the event's type for omstream's own events (`om-message-accepted` →
               `data-om-message-accepted`); the `data-om-*` events keep theirs
    id         data-om-status                  `om-status` (one status, replaced in place)
               observation/buffering start, end, failed and activation
                                               the cycle id (`data.cycleId`)
               data-om-thread-update           `om-thread-title` (the current title)
               om-working-memory-updated       `om-working-memory` (the current document)
               om-message-accepted             the message id
               om-temporal-gap                 the reminder's id (`data.markerId`)
               om-result-ignored, om-memory-deleted, om-input-held, om-input-released
                                               the event id (unique)
    transient  true for status (a new one every step), accepted messages (the chat already
               holds them), ignored results (diagnostics) and holds and releases (a state of
               the moment, like the status): the AI SDK hands them to `onData` and keeps them
               out of the message's parts; false for the rest, which a UI keeps.
"""

from __future__ import annotations

from typing import Any

import orjson

from omstream.schemas.parts import DataPart, part_type

__all__ = ["TRANSIENT", "data_part", "event_type", "frame_json", "part_type"]

TRANSIENT = frozenset({"data-om-status", "om-message-accepted", "om-result-ignored", "om-input-held",
                       "om-input-released"})
_FIXED_IDS = {"data-om-status": "om-status", "data-om-thread-update": "om-thread-title",
              "om-working-memory-updated": "om-working-memory"}


def event_type(kind: str) -> str:
    """The event type of a part type (or of an event type: unchanged)."""
    if kind.startswith("data-om-") and not _is_data_event(kind):
        return kind[len("data-"):]
    return kind


def _is_data_event(kind: str) -> bool:
    from omstream.schemas.events import EVENT_TYPES

    return kind in EVENT_TYPES


def part_id(event: Any) -> str:
    if event.type in _FIXED_IDS:
        return _FIXED_IDS[event.type]
    data = event.data
    if event.type == "om-message-accepted":
        return str(data.message.id)
    if event.type == "om-temporal-gap":
        return str(data.marker_id)
    if event.type in ("om-result-ignored", "om-memory-deleted", "om-input-held", "om-input-released"):
        return str(event.event_id)
    return str(data.cycle_id)


def data_part(event: Any) -> DataPart:
    """The part of one typed event (`omstream.schemas.events`)."""
    return DataPart.model_construct(
        type=part_type(event.type), id=part_id(event),
        data=event.data.wire(), transient=event.type in TRANSIENT)


def frame_json(part: DataPart) -> str:
    """The four keys in the SDK's order, as one line of JSON."""
    return orjson.dumps({"type": part.type, "id": part.id, "data": part.data,
                         "transient": part.transient}).decode()
