"""The records of `<ns>.dlq`: what the worker refused, why, where it was, and its bytes.

A dead letter names the refused record by its position (`source`), so `om export` can leave it
out of a thread's history, and carries its original bytes (base64), so nothing is lost: a
producer can read why, fix the record and send it again.  `code` is one of a closed set
(`DeadLetterCode`), `reason` says in words what was wrong and, for a limit, which `[omstream]`
key sets it.

The worker writes every dead letter through `DeadLetter` and `omstream.schemas.codec.encode`:
sorted keys, and `key` written as `null` when the record had none (unlike the other wire
models, which leave unset fields out).
"""

from __future__ import annotations

import base64
from typing import Any, Literal

from pydantic import Field

from .base import Count, NonEmptyStr, WireModel

__all__ = ["DeadLetter", "DeadLetterCode", "DeadLetterSource", "FoldCode", "LimitCode", "UnreadableCode"]

#: The record cannot be read as an input (`omstream.schemas.codec.decode_input`): not JSON, a
#: `type` this worker does not know, a `schemaVersion` newer than it reads, or a record its
#: model refuses (also a `resource-deleted` without a thread in thread scope, and a model job
#: that names no cycle to answer).
UnreadableCode = Literal["not-json", "unknown-type", "newer-schema", "invalid"]
#: An input limit is broken (`omstream.limits`, docs/producing.md, "Limits and dead letters").
LimitCode = Literal["too-large", "too-deep", "too-many-parts", "text-too-long", "future-time", "memory-busy"]
#: The fold agent refused the record itself (`omstream.pipeline.folding`): a model result
#: without the model agents' signature, a record keyed by another memory, a part of a record
#: the fold refused (a message id reused with other content, a command to a disabled memory:
#: the rest of the record is folded), a fold that raised, an output or state record too large
#: for the broker, and a stored state that cannot be read (its bytes; the memory starts again).
FoldCode = Literal["forged-result", "wrong-key", "conflict", "fold-error", "output-too-large", "state-unreadable"]
#: Every code a dead letter may carry.
DeadLetterCode = Literal[UnreadableCode, LimitCode, FoldCode]


class DeadLetterSource(WireModel):
    """Where the refused record was."""

    topic: NonEmptyStr
    """The topic it was read from: the input log `<ns>.log`, the jobs topic `<ns>.jobs`, or the
    state table's changelog (`state-unreadable`)."""
    partition: Count
    """Its partition."""
    offset: int = Field(ge=-1)
    """Its offset; -1 for a stored state (`state-unreadable`), which has no log position."""


class DeadLetter(WireModel):
    """A record the worker refused, with the reason and its original bytes (`<ns>.dlq`)."""

    type: Literal["dead-letter"] = "dead-letter"
    """Record kind: always `dead-letter`."""
    code: DeadLetterCode
    """Why, as a code: `not-json`, `unknown-type`, `newer-schema`, `invalid` (unreadable);
    `too-large`, `too-deep`, `too-many-parts`, `text-too-long`, `future-time`, `memory-busy`
    (input limits); `forged-result`, `wrong-key`, `conflict`, `fold-error`, `output-too-large`,
    `state-unreadable` (refused by the fold agent). A `conflict` record was folded all the same:
    the fold refused a part of it."""
    reason: str
    """Why, in words a person can act on."""
    source: DeadLetterSource
    """Where the record was."""
    key: str | None
    """The record's key as UTF-8 (bytes that are not UTF-8 replaced by U+FFFD); null when the
    record had none."""
    value: str
    """The record's bytes, base64 (standard alphabet, padded); empty when it had none."""

    @classmethod
    def of(cls, *, code: DeadLetterCode, reason: str, topic: str, partition: int, offset: int,
           key: bytes | None, value: bytes | None) -> DeadLetter:
        """The dead letter of a record, from its raw key and value."""
        return cls(code=code, reason=reason, source=DeadLetterSource(topic=topic, partition=partition, offset=offset),
                   key=key.decode("utf-8", "replace") if key is not None else None,
                   value=base64.b64encode(value or b"").decode())

    def wire(self) -> dict[str, Any]:
        """The JSON-ready dict; `key` is kept as null when the record had none."""
        return self.model_dump(mode="json", by_alias=True)

    def original(self) -> bytes:
        """The refused record's bytes."""
        return base64.b64decode(self.value)
