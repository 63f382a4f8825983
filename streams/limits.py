"""Input limits: what a record of `<ns>.log` may weigh before the fold agent reads it.

A record that breaks a limit goes to `<ns>.dlq` with the limit's code and a reason naming the
limit and the value found; the memory's state is left as it was.  The checks are pure functions
of the record and the limits, so a refold of the same log dead-letters the same records.

=====================  ===============================  =========  ===================  ==============
limit                  `[omstream]` key (`OM_*` env)     default    checked on           dead-letter code
=====================  ===============================  =========  ===================  ==============
record size            `max_record_bytes`               524288     the raw bytes        `too-large`
JSON nesting depth     `max_depth`                      64         the raw bytes        `too-deep`
parts per message      `max_parts`                      200        the decoded message  `too-many-parts`
characters per part    `max_text_chars`                 100000     the decoded message  `text-too-long`
clock skew             `max_clock_skew_ms`              300000     `createdAt` vs the   `future-time`
                                                                   record's timestamp
held inputs            `max_held`                       10000      the memory's state   `memory-busy`
=====================  ===============================  =========  ===================  ==============

The size and depth checks run on the raw bytes, before `orjson` or pydantic see them: a record
nested deeper than `orjson` can serialize again (it stops at 255 levels) would otherwise pass
validation and crash the worker when an event carrying it is encoded.  The depth scan is
iterative and skips string contents, so brackets inside strings do not count.

The clock-skew check compares a message's `createdAt` with the record's Kafka timestamp, the
log's own time, so it gives the same answer on every refold.

`max_held` bounds the inputs a memory holds while a blocking cycle runs (each is stored as a record
of its own, `omstream.pipeline.storage`, so the bound is about time and disk, not the state record's size:
a burst of thousands of messages on one thread is held, not refused): beyond it, a record the
fold would hold is dead-lettered as `memory-busy` and the cycle goes on.  Failing the cycle
early instead would let a burst of inputs cancel an observation that is about to succeed and
make what the memory decides depend on how fast a producer sends; a busy memory is a state the
producer can see and retry, and it cannot last: every blocking cycle ends by its deadlines.

=====================  ==============================================  =========
deadline               where                                           default
=====================  ==============================================  =========
model job              `job_deadline_ms` (`OM_JOB_DEADLINE_MS`)        300000 ms
blocking cycle         `observationalMemory.cycleDeadline`             `"10m"`
=====================  ==============================================  =========

A model agent answers a job it has not finished after `[omstream] job_deadline_ms` with a
failed result (`errorCode: deadline`).  The fold's backstop, for a result that never reaches the log: a
blocking cycle that started more than `cycleDeadline` before the event time of a later input of
its memory fails (`deadline: ...`) and the inputs it held are applied; an answer arriving after
that is recorded as ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from omstream.schemas.dead_letters import LimitCode
from omstream.schemas.messages import Message

__all__ = ["Limits", "Violation", "json_depth", "check_raw", "check_message", "check_held"]


@dataclass(frozen=True)
class Limits:
    """The limits of one worker (see the module docstring for their meaning and defaults)."""

    max_record_bytes: int = 512 * 1024
    max_depth: int = 64
    max_parts: int = 200
    max_text_chars: int = 100_000
    max_clock_skew_ms: int = 5 * 60 * 1000
    max_held: int = 10_000

    @classmethod
    def from_settings(cls, settings: Any) -> Limits:
        return cls(**{name: getattr(settings, name) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Violation:
    """A broken limit: the dead-letter `code` and a `reason` a person can act on."""

    code: LimitCode
    reason: str


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # "...", escapes unrolled
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_NOT_CLOSING = bytes(b for b in range(256) if b not in b"[{")


def json_depth(raw: bytes, stop_after: int | None = None) -> int:
    """The deepest nesting of arrays and objects in `raw` (0 for a scalar).

    String contents (with their escapes) do not count; an unterminated string runs to the end.
    It does not validate the JSON (the decoder does that next).  The strings and everything but
    brackets are removed at C speed first, so the Python loop only sees brackets; with
    `stop_after`, it returns as soon as the depth exceeds it.
    """
    bare = _STRING.sub(b"", raw)
    quote = bare.find(b'"')
    if quote >= 0:
        bare = bare[:quote]
    depth = deepest = 0
    for byte in bare.translate(None, _NOT_BRACKETS):
        if byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_after is not None and deepest > stop_after:
                    return deepest
        else:  # ] }
            depth -= 1
    return deepest


def check_raw(raw: bytes | None, limits: Limits) -> Violation | None:
    """The size and depth limits, on the bytes as they came off the broker."""
    size = len(raw or b"")
    if size > limits.max_record_bytes:
        return Violation("too-large", f"record is {size} bytes; the limit is {limits.max_record_bytes} "
                         "(omstream.max_record_bytes): store large content elsewhere and send a reference")
    brackets = (raw or b"").translate(None, _NOT_CLOSING)
    if len(brackets) <= limits.max_depth:
        return None  # cannot nest deeper than it has brackets: the common case, at C speed
    depth = json_depth(raw or b"", stop_after=limits.max_depth)
    if depth > limits.max_depth:
        return Violation("too-deep", f"record nests arrays/objects more than {limits.max_depth} levels "
                         "deep (omstream.max_depth)")
    return None


def _chars(value: Any) -> int:
    """The characters of every string in a part (keys included), iteratively."""
    total, todo = 0, [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return total


def check_message(message: Message, limits: Limits, log_time_ms: int | None) -> Violation | None:
    """The per-message limits: parts, characters per part, and `createdAt` not ahead of the log.

    `log_time_ms` is the record's Kafka timestamp (None when the broker gave none: no skew
    check then).
    """
    if isinstance(message.content, str):
        parts: list[Any] = [message.content]
    else:
        parts = [p.model_dump(mode="json", by_alias=True, exclude_none=True) for p in message.content]
        if len(parts) > limits.max_parts:
            return Violation("too-many-parts", f"message {message.id!r} has {len(parts)} parts; the limit "
                             f"is {limits.max_parts} (omstream.max_parts)")
    for index, part in enumerate(parts):
        chars = _chars(part)
        if chars > limits.max_text_chars:
            return Violation("text-too-long", f"message {message.id!r} part {index} has {chars} characters; "
                             f"the limit is {limits.max_text_chars} per part (omstream.max_text_chars)")
    if log_time_ms is not None and log_time_ms > 0:
        ahead = _ms(message.created_at) - log_time_ms
        if ahead > limits.max_clock_skew_ms:
            return Violation("future-time", f"message {message.id!r} createdAt {message.created_at.isoformat()} "
                             f"is {ahead} ms ahead of the record's log time; the limit is "
                             f"{limits.max_clock_skew_ms} ms (omstream.max_clock_skew_ms)")
    return None


def check_held(held: int, limits: Limits) -> Violation | None:
    """Whether a memory holding `held` inputs behind a blocking cycle may hold one more."""
    if held >= limits.max_held:
        return Violation("memory-busy", f"the memory already holds {held} inputs behind a blocking "
                         f"cycle (omstream.max_held = {limits.max_held}); resend after the cycle ends")
    return None


def _ms(at: datetime) -> int:
    return round(at.timestamp() * 1000)
