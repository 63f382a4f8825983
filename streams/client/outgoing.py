"""What `OmClient` refuses before sending: every record the worker would dead-letter on sight.

The worker refuses a record of `<ns>.log` by checks that need no memory state
(`omstream.pipeline.folding`): the size and depth of its bytes, whether it decodes as a record
(`invalid`, `newer-schema`), a message's parts, characters per part and `createdAt` against the
log's time, and a command's keys (resource scope: `UnroutedRecord`, which `OmClient.send_control`
raises first).  The client runs the same checks, with
the same limits (`omstream.limits`, from the settings it shares with the worker), on the bytes it
is about to produce, and raises `RefusedRecord` with the dead-letter code the worker would give
and its one-line reason, so a producer learns at the call, not from `<ns>.dlq`.

What the client cannot know it leaves to the worker: `memory-busy` (the memory's state) and a
skew between its own clock and the broker's larger than the producer's.  The key is the client's
own (`memory_key`), so `wrong-key` cannot happen; `send_raw` checks nothing on purpose.
"""

from __future__ import annotations

import time

from omstream.schemas.codec import DecodeFailure, decode_input
from omstream.schemas.control import ResourceDeleted
from omstream.schemas.errors import OmError
from omstream.schemas.messages import Message

from ..limits import Limits, check_message, check_raw
from ..settings import Settings

__all__ = ["RefusedRecord", "check_outgoing"]


class RefusedRecord(OmError, ValueError):
    """A record the worker would dead-letter, refused before it was sent; `code` is the
    dead-letter code it would have had (`too-large`, `invalid`, `future-time`, ...)."""

    def __init__(self, code: str, reason: str) -> None:
        self.code, self.reason = code, reason
        super().__init__(f"{code}: {reason}")


def check_outgoing(settings: Settings, value: bytes, *, now_ms: int | None = None) -> None:
    """Raise `RefusedRecord` if the worker would dead-letter `value` (a record's plain bytes,
    before any sealing: the worker checks what it opens) at once.  `now_ms`, the
    producer's clock, stands for the record's log time (the broker stamps it on arrival)."""
    limits = Limits.from_settings(settings)
    violation = check_raw(value, limits)
    if violation is not None:
        raise RefusedRecord(violation.code, violation.reason)
    decoded = decode_input(value)  # a record built without validation (`model_copy`) is caught here
    if isinstance(decoded, DecodeFailure):
        raise RefusedRecord(decoded.code, decoded.reason)
    if isinstance(decoded, Message):
        violation = check_message(decoded, limits, round(time.time() * 1000) if now_ms is None else now_ms)
        if violation is not None:
            raise RefusedRecord(violation.code, violation.reason)
        return
    if isinstance(decoded, ResourceDeleted) and decoded.thread_id is None and settings.om.scope == "thread":
        raise RefusedRecord("invalid", "resource-deleted needs a threadId in thread scope: send one per "
                            "thread of the resource")
