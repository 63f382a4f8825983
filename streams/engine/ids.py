"""Deterministic identifiers: a function of the memory key and a sequence number, nothing else."""

from __future__ import annotations

import uuid

__all__ = ["cycle_id", "event_id", "record_id"]

_NAMESPACE = uuid.UUID("6f6d7374-7265-616d-0000-000000000001")


def _derive(*parts: object) -> str:
    return str(uuid.uuid5(_NAMESPACE, "/".join(str(p) for p in parts)))


def event_id(memory_key: str, seq: int) -> str:
    return _derive("event", memory_key, seq)


def cycle_id(memory_key: str, seq: int) -> str:
    return _derive("cycle", memory_key, seq)


def record_id(memory_key: str, generation: int) -> str:
    return _derive("record", memory_key, generation)
