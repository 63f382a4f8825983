"""A thread's view as store rows: one head (everything but the messages) and one row per message.

The messages are most of a view and only ever grow (`setdefault`, until the memory is deleted),
so they are written once each, in the order the view received them, and decoded only when read
(`StoredMessages`); the observation text is written when it changes; the head, the rest, is
small and rewritten whole whenever the view changes.  Decoding gives back a `ThreadView` equal field for
field to the one encoded, so a restarted projection renders the same windows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping
from datetime import datetime, tzinfo
from typing import Any

import orjson

from omstream.schemas.codec import encode
from omstream.schemas.messages import Message

from ..views.context import ThreadView

__all__ = ["StoredMessages", "decode_view", "encode_head", "encode_message"]

# The head's schema; a store written with another one is rebuilt from the topic
# (projections/store/store.py compares it with the stored one).
HEAD_VERSION = 2


def _time(value: datetime | None) -> str | None:
    # isoformat keeps the offset and the microseconds: the instant comes back exactly.
    return None if value is None else value.isoformat()


def _untime(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def encode_head(view: ThreadView) -> bytes:
    """Every field of the view but its messages, its observations (the longest field, written
    only when it changes) and its time zone (the projection's setting)."""
    activation = view.last_activation
    return orjson.dumps({
        "memoryKey": view.memory_key,
        "observed": sorted(view.observed),
        "cursor": view.cursor,
        "generation": view.generation,
        "currentTask": view.current_task,
        "suggestedResponse": view.suggested_response,
        "extracted": view.extracted,
        "title": view.title,
        "inFlight": sorted(view.in_flight),
        "lastSeq": view.last_seq,
        "events": view.events,
        "cycles": view.cycles,
        "lastActivation": None if activation is None else
        [activation[0], _time(activation[1]), activation[2]],
        "lastFailure": view.last_failure,
        "held": view.held,
        "clock": _time(view.clock),
    })


def encode_message(message: Message) -> bytes:
    return encode(message)


class StoredMessages(MutableMapping[str, Message]):
    """A view's messages as read from the store, each decoded when first read.

    A restart loads every thread's messages; most are observed already and only counted, so
    decoding them all would be most of the start time.  Keys keep the order they were written
    in (it breaks ties between messages of the same `createdAt` in the window)."""

    def __init__(self, rows: Iterable[tuple[str, bytes]] = ()) -> None:
        self._items: dict[str, Message | bytes] = dict(rows)

    def __getitem__(self, key: str) -> Message:
        value = self._items[key]
        if isinstance(value, bytes):
            value = self._items[key] = Message.model_validate_json(value)
        return value

    def __setitem__(self, key: str, value: Message) -> None:
        self._items[key] = value

    def __delitem__(self, key: str) -> None:
        del self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __repr__(self) -> str:
        return f"StoredMessages({len(self)} messages)"


def decode_view(thread_id: str, head: bytes, observations: str, messages: Iterable[tuple[str, bytes]],
                time_zone: str | tzinfo) -> ThreadView:
    """The view of `encode_head`, its observations and its messages' (key, row), in the order
    they were written."""
    h: dict[str, Any] = orjson.loads(head)
    kept = StoredMessages(messages)
    activation = h["lastActivation"]
    return ThreadView(
        thread_id=thread_id,
        memory_key=h["memoryKey"],
        messages=kept,
        observed=set(h["observed"]),
        observations=observations,
        cursor=h["cursor"],
        generation=h["generation"],
        current_task=h["currentTask"],
        suggested_response=h["suggestedResponse"],
        extracted=h["extracted"],
        title=h["title"],
        in_flight=set(h["inFlight"]),
        last_seq=h["lastSeq"],
        events=h["events"],
        cycles=h["cycles"],
        last_activation=None if activation is None else
        (activation[0], _untime(activation[1]), activation[2]),
        last_failure=h["lastFailure"],
        held=h.get("held"),  # absent from rows written before holds were told
        clock=_untime(h["clock"]),
        time_zone=time_zone,
    )
