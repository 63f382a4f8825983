"""The fold agent's step 1, "fold" (see `omstream.worker.fold_loop`): a batch of input records
in, the records to send and the memories' new states out, with no I/O.

For each record, in log order (a memory's records always in their order), `fold_record` checks
the input limits (`omstream.limits`: size and JSON depth on the raw bytes, parts, characters
per part and `createdAt` against the record's log time after decoding, held inputs per memory)
and decodes it (unreadable records go to `<ns>.dlq` with the reason and the original bytes; a
model result without the model agents' signature too, see `omstream.pipeline.signing`); loads the
memory's state, once per batch (`omstream.pipeline.memories`); skips the record if the state already
folded its offset (a redelivery after a crash); calls `fold` and checks the size of every
output and state record it makes.

`fold_batch` never raises: any exception, and any output or state record larger than
`MAX_OUTPUT_BYTES`, dead-letters the record (`fold-error`, `output-too-large`) and leaves the
memory's state as it was.  A model answer that cannot be applied ends its cycle as failed
instead (its `*-failed` event, error "could not apply the model's answer: ...") and is
dead-lettered too.  A stored state that cannot be read is dead-lettered (`state-unreadable`)
and the memory starts again.

With a namespace key, `fold_record` opens each input before the limits and the decoding (the
signature of a model result is checked on the bytes as written, sealed), passes over an input
whose key was shredded and seals what it writes (`omstream.pipeline.sealed_fold`); the engine
never sees a ciphertext.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from omstream.crypto.errors import Shredded, Tampered
from omstream.engine.fold import EngineConfig, Input, addressed, fold, holds, new_state
from omstream.engine.state import MemoryState
from omstream.engine.step import HookCall
from omstream.schemas.codec import DecodeFailure, decode_input, encode
from omstream.schemas.control import ResourceDeleted
from omstream.schemas.dead_letters import DeadLetter, DeadLetterCode
from omstream.schemas.errors import OmError
from omstream.schemas.events import EventEnvelope
from omstream.schemas.jobs import ModelResult
from omstream.schemas.keys import memory_key, unrouted
from omstream.schemas.messages import Message

from ..limits import Limits, check_held, check_message, check_raw
from ..settings import Settings
from ..topics import Topics
from .memories import Memories, TooLarge
from .sealed_fold import BatchKeys, deleted_owners, event_context, event_owner, job_context
from .sending import OutputRecord
from .signing import signed

__all__ = ["MAX_OUTPUT_BYTES", "Consumed", "FoldContext", "Outcome", "dead_letter", "fold_batch", "fold_record",
           "refuse"]

log = logging.getLogger("omstream.worker")

#: Largest output record the fold agent sends; the broker's default `max.message.bytes` is ~1 MB.
MAX_OUTPUT_BYTES = 900 * 1024


class Consumed(Protocol):
    """A record as the consumer hands it over (Faust's `Message`): what the worker reads of it."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None: ...


@dataclass(frozen=True)
class FoldContext:
    """What the fold agent needs besides the record and the stored state."""

    settings: Settings
    topics: Topics
    config: EngineConfig
    limits: Limits
    result_key: bytes
    threads: frozenset[str] = frozenset()  # empty: every thread
    resources: frozenset[str] = frozenset()  # memory keys (`resource:<id>`); empty: every memory


@dataclass(frozen=True)
class Outcome:
    """What one input record does: send `records`; the memory under `key` becomes `state`
    (None: it stays as it was)."""

    records: list[OutputRecord] = field(default_factory=list)
    key: bytes = b""
    state: MemoryState | None = None
    shreds: tuple[str, ...] = ()  # the owners the record deleted (`omstream.pipeline.sealed_fold`)
    hooks: tuple[HookCall, ...] = ()  # the lifecycle hooks to call once `records` are sent


class _Refused(OmError):
    """A record the fold agent dead-letters with `code` (raised inside `fold_record` only)."""

    def __init__(self, code: DeadLetterCode, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def dead_letter(message: Consumed, code: DeadLetterCode, reason: str) -> DeadLetter:
    """The `<ns>.dlq` record of a refused record: why, where from, and its original bytes."""
    return DeadLetter.of(code=code, reason=reason, topic=message.topic, partition=message.partition,
                         offset=message.offset, key=message.key, value=message.value)


def _logged(message: Consumed, code: DeadLetterCode, reason: str) -> None:
    """The one log line of every dead letter, whoever refuses the record: an operator greps
    the worker's log for "dead-lettered" and finds each one with where it came from."""
    log.warning("dead-lettered", extra={"topic": message.topic, "offset": message.offset,
                                        "code": code, "reason": reason[:300]})


def refuse(dlq: str, message: Consumed, code: DeadLetterCode, reason: str) -> Outcome:
    """A record refused whole: its dead letter, logged, and nothing else."""
    _logged(message, code, reason)
    return Outcome([OutputRecord(dlq, message.key or b"", encode(dead_letter(message, code, reason)))])


def _stamped(events: Iterable[EventEnvelope], offset: int) -> list[EventEnvelope]:
    """The events of one input record with its log offset, the last one marked: readers wait
    for their own writes with it (same partition: `<ns>.events` and `<ns>.log` are both keyed
    by the memory key with the default partitioner and have the same partition count)."""
    events = tuple(events)
    last = len(events) - 1
    return [e.model_copy(update={"input_offset": offset, "input_last": True if i == last else None})
            for i, e in enumerate(events)]


def _log_time_ms(message: Consumed) -> int | None:
    """The record's Kafka timestamp in ms (the log's time), or None when the broker gave none."""
    stamp = getattr(message, "timestamp", None)
    return round(stamp * 1000) if stamp else None


def _log_time(message: Consumed) -> datetime | None:
    ms = _log_time_ms(message)
    return datetime.fromtimestamp(ms / 1000, UTC) if ms is not None else None


def fold_record(ctx: FoldContext, message: Consumed, memories: Memories, keys: BatchKeys | None = None) -> Outcome:
    """Everything the fold agent does for one record, except the I/O; never raises.

    `memories` holds the states of the batch the record belongs to.  Any failure to decode,
    check, fold or encode the record, and any output or state record larger than
    `MAX_OUTPUT_BYTES`, dead-letters the record and leaves the memory's state as it was; a model
    result that cannot be applied ends its cycle with the cycle's failed event instead (and is
    dead-lettered too), so no cycle waits for it forever.

    `keys` (None: plain) opens a sealed input and seals the outputs; an input whose key was
    shredded is passed over (its memory was deleted), one that does not authenticate is
    dead-lettered (`invalid`).
    """
    keys = keys if keys is not None else BatchKeys()
    try:
        return _fold_checked(ctx, message, memories, keys)
    except Shredded:
        keys.passed_over += 1
        log.info("passed over a record of a deleted memory", extra={"offset": message.offset})
        return Outcome()
    except Tampered:
        return refuse(ctx.topics.dlq, message, "invalid", "a sealed record that does not authenticate "
                      "(edited, truncated or moved to another memory)")
    except _Refused as refused:
        return refuse(ctx.topics.dlq, message, refused.code, refused.reason)
    except Exception as exc:  # noqa: BLE001 - nothing may stop the fold agent
        log.warning("fold failed", exc_info=True, extra={"topic": message.topic, "offset": message.offset})
        return refuse(ctx.topics.dlq, message, "fold-error", f"{type(exc).__name__}: {exc}"[:2000])


def fold_batch(ctx: FoldContext, messages: Iterable[Consumed], memories: Memories,
               keys: BatchKeys | None = None, hooks: list[HookCall] | None = None) -> list[OutputRecord]:
    """Fold a batch of records in log order: the records to send; the memories' new states stay
    in `memories` (`memories.writes()` is what to store), the owners to shred in `keys.shreds`,
    the lifecycle hooks to call once the records are sent in `hooks`.  Never raises."""
    records: list[OutputRecord] = []
    for message in messages:
        outcome = fold_record(ctx, message, memories, keys)
        if keys is not None:
            keys.roll(outcome.shreds)  # the batch's later outputs of these owners: their successors
        records += outcome.records
        if hooks is not None:
            hooks += outcome.hooks
        if outcome.state is not None:
            memories.put(outcome.key, outcome.state)
    for unreadable in memories.unreadable:
        log.error("stored state unreadable; the memory starts again",
                  extra={"key": unreadable.key.decode(errors="replace")})
        letter = DeadLetter.of(
            code="state-unreadable", reason=f"the memory's stored state could not be read and was "
            f"replaced by an empty one (its bytes are here): {unreadable.reason}",
            topic=ctx.topics.state_changelog(ctx.settings.app_id), partition=unreadable.partition, offset=-1,
            key=unreadable.key, value=unreadable.raw)
        records.append(OutputRecord(ctx.topics.dlq, unreadable.key, encode(letter)))
    return records


def _fold_checked(ctx: FoldContext, message: Consumed, memories: Memories, keys: BatchKeys) -> Outcome:
    # Opened first: the limits are the content's, with or without encryption.  The memory key
    # is the record's key; a wrong one fails to open (`Tampered`) or is refused below.
    value = keys.open_input((message.key or b"").decode("utf-8", "replace"), message.value)
    violation = check_raw(value, ctx.limits)
    if violation is not None:
        raise _Refused(violation.code, violation.reason)
    record = decode_input(value)
    if isinstance(record, DecodeFailure):
        raise _Refused(record.code, record.reason)
    key = _checked_key(ctx, message, record)
    if isinstance(record, ModelResult) and not addressed(record, ctx.config):
        return Outcome()  # another version's: not even its position is part of this memory
    if ctx.threads and getattr(record, "thread_id", None) not in ctx.threads:
        return Outcome()  # a version of some threads only (`om replay --threads`)
    if ctx.resources and key not in ctx.resources:
        return Outcome()  # a version of some resources only (`om replay --resources`)
    if isinstance(record, Message):
        violation = check_message(record, ctx.limits, _log_time_ms(message))
        if violation is not None:
            raise _Refused(violation.code, violation.reason)
    kbytes = key.encode()
    state = memories.get(kbytes, message.partition)
    if state is not None and message.offset <= state.offsets.get(message.topic, -1):
        # Folded before a crash: its outputs were sent before its state was stored, and the
        # local store is written only after the changelog has it, so there is nothing to redo.
        return Outcome()
    if state is None:
        state = _new_memory(key, record, memories.salvaged_seq(kbytes))
    # A settled version holds a memory's inputs until its own result comes back, and that
    # result is written at the log's end: a replay reading history holds a memory's whole
    # remaining history at first.  Refusing any of it would make the replay depend on how far
    # ahead it read, so `max_held` bounds the versions that follow the log only.
    if not ctx.config.settled and holds(state, record, ctx.config, log_time=_log_time(message)):
        violation = check_held(len(state.held), ctx.limits)
        if violation is not None:
            raise _Refused(violation.code, violation.reason)
    try:
        return _fold_outcome(ctx, message, kbytes, state, record, memories, keys)
    except Exception as exc:
        if not isinstance(record, ModelResult) or not record.ok:
            raise
        return _fail_result(ctx, message, kbytes, state, record, exc, memories, keys)


def _new_memory(key: str, record: Input, seq: int) -> MemoryState:
    """The state a memory starts from; `seq` continues an unreadable stored state's events."""
    resource = getattr(record, "resource_id", None)
    owner = record.thread_id or resource
    if owner is None:  # every input names a thread, or (a resource-wide deletion) its resource
        raise ValueError(f"{record.type} names neither a thread nor a resource")
    state = new_state(key, owner, resource)
    return state.model_copy(update={"seq": seq}) if seq else state


def _checked_key(ctx: FoldContext, message: Consumed, record: Input) -> str:
    """The record's memory key, after the checks that need no state (signature, scope, key)."""
    if isinstance(record, ModelResult):
        if not signed(ctx.result_key, message.value or b"", message.headers):
            raise _Refused("forged-result", "a model-result record without a valid signature: "
                           "results are written by the model agents only")
        key = record.memory_key
    elif (isinstance(record, ResourceDeleted) and record.thread_id is None
          and ctx.settings.om.scope == "thread"):
        raise _Refused("invalid", "resource-deleted needs a threadId in thread scope: send one per "
                       "thread of the resource, keyed by its memory key")
    else:
        if not isinstance(record, Message) and (
                reason := unrouted(ctx.settings.om, record.type, record.thread_id, record.resource_id)):
            raise _Refused("invalid", reason)
        key = memory_key(ctx.settings.om, record.thread_id, record.resource_id)
    if (message.key or b"").decode("utf-8", "replace") != key:
        raise _Refused("wrong-key", f"record key must be the memory key {key!r} (it was "
                       f"{message.key!r}); all inputs of one memory must share its partition")
    return key


def _fold_outcome(ctx: FoldContext, message: Consumed, kbytes: bytes, state: MemoryState, record: Input,
                  memories: Memories, keys: BatchKeys) -> Outcome:
    """Fold, encode (and seal) every output and check its size (and the state's) before
    anything is sent."""
    folded = fold(state, record, ctx.config, log_time=_log_time(message))
    topics = ctx.topics
    key = kbytes.decode()
    events = _stamped(folded.events, message.offset)
    # A deletion's own outputs already use the successor keys of what it deletes.
    shreds = deleted_owners(key, state, events) if keys.enabled and keys.shredding else ()
    records = [OutputRecord(topics.events, kbytes, keys.seal_output(
        encode(e), event_owner(key, e), event_context(e), shreds)) for e in events]
    records += [OutputRecord(topics.jobs, kbytes, keys.seal_output(encode(j), key, job_context(j), shreds))
                for j in folded.jobs]
    records += [OutputRecord(topics.dlq, kbytes, encode(dead_letter(message, "conflict", refused.reason)))
                for refused in folded.rejected]
    for topic, _, value in records:
        if len(value) > MAX_OUTPUT_BYTES:
            raise _Refused("output-too-large", f"folding the record makes a {topic} record of "
                           f"{len(value)} bytes; the limit is {MAX_OUTPUT_BYTES} (below the broker's "
                           "max.message.bytes)")
    after = folded.state.model_copy(update={"offsets": {**folded.state.offsets, message.topic: message.offset}})
    try:
        # The state's records go to the table's changelog: one the broker refuses would stop
        # the worker.  Refusing the input keeps the memory as it was.
        memories.check(kbytes, state, after)
    except TooLarge as exc:
        raise _Refused("output-too-large", str(exc)) from None
    # The fold's own refusals (a message id reused for other content, a command to a memory
    # that is off) are logged only now: a record refused whole above sends none of them.
    for refused in folded.rejected:
        _logged(message, "conflict", refused.reason)
    return Outcome(records, kbytes, after, shreds, folded.hooks)


def _fail_result(ctx: FoldContext, message: Consumed, kbytes: bytes, state: MemoryState, result: ModelResult,
                 exc: Exception, memories: Memories, keys: BatchKeys) -> Outcome:
    """A model answer the fold could not apply: end its cycle as failed, dead-letter the answer."""
    code: DeadLetterCode = exc.code if isinstance(exc, _Refused) else "fold-error"
    reason = exc.reason if isinstance(exc, _Refused) else f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, _Refused):
        log.warning("model result could not be applied", exc_info=True,
                    extra={"cycle": result.cycle_id, "offset": message.offset})
    failed = result.model_copy(update={
        "ok": False, "output": None, "error_code": code,
        "error": f"could not apply the model's answer: {reason}"[:2000]})
    outcome = _fold_outcome(ctx, message, kbytes, state, failed, memories, keys)
    dead = refuse(ctx.topics.dlq, message, code, f"model result not applied ({reason})"[:2000])
    return Outcome(dead.records + outcome.records, outcome.key, outcome.state, outcome.shreds, outcome.hooks)
