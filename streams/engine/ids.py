"""Deterministic identifiers: a function of the memory key and a sequence number, nothing else.

An event's and a cycle's id count the memory's events but its notices (`om-input-held`,
`om-input-released`, which tell when the memory held inputs, so depend on when a model answered):
the same memory gets the same ids whenever its answers came.  A notice's own id comes from its
`seq`, in a namespace of its own."""

from __future__ import annotations

import uuid

__all__ = ["cycle_id", "event_id", "notice_id", "record_id"]

_NAMESPACE = uuid.UUID("6f6d7374-7265-616d-0000-000000000001")


def _derive(*parts: object) -> str:
    return str(uuid.uuid5(_NAMESPACE, "/".join(str(p) for p in parts)))


def event_id(memory_key: str, seq: int) -> str:
    return _derive("event", memory_key, seq)


def notice_id(memory_key: str, seq: int) -> str:
    return _derive("notice", memory_key, seq)


def cycle_id(memory_key: str, seq: int) -> str:
    return _derive("cycle", memory_key, seq)


def record_id(memory_key: str, generation: int) -> str:
    return _derive("record", memory_key, generation)
