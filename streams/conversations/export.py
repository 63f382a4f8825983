"""`om export`: a thread's retained history in `<ns>.log`, as a conversation file.

The lines are the thread's input records in the log's order and in their wire format (messages,
steps, turn ends, commands), which `om simulate` reads: a user can try another configuration on
a live thread offline, and `om simulate` of the export under the live configuration decides what
the live memory decided.

Only what the fold applied is history, so the export leaves out:

- records of other memories (the record key is not the thread's memory key), and in resource
  scope records of the resource's other threads when a thread is named;
- records that do not decode, and model results (a simulation calls the models itself);
- records the worker refused before folding them: the version's dead-letter topic names each
  one by its log position.  A `conflict` dead letter is the exception: the fold itself refused
  part of that record (a message id reused with other content, a command to a disabled memory)
  and still folded it, and a simulation of the record refuses it the same way.

Refusals are known only for records the worker has folded: export a log the worker has caught
up with.

In a namespace with a key, each record is opened before it is chosen, and the export is written
in clear (what `om simulate` reads).  A record whose key was shredded (a deleted thread, or a
deleted thread's messages in resource scope) is never written: it is counted as `shredded`, one
that does not authenticate as `tampered`, and a sealed one read without a key as `no-key`.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from pydantic import ValidationError

from omstream.crypto.opening import Opener
from omstream.crypto.sealing import sealer_of
from omstream.schemas.codec import DecodeFailure, decode_input, encode
from omstream.schemas.dead_letters import DeadLetter, DeadLetterCode
from omstream.schemas.errors import OmError
from omstream.schemas.jobs import ModelResult
from omstream.schemas.keys import memory_key

from ..plural import plural
from ..settings import Settings
from ..topics import Topics, memory_partition, partitions_of, read_until_end
from .files import ConversationRecord

__all__ = ["ExportSummary", "Selection", "UnknownVersion", "choose", "export", "refused_positions"]

#: Why a record of the log is not in the export, in the order `choose` checks them.
SKIP_REASONS = ("other-memory", "shredded", "tampered", "no-key", "undecodable", "model-result", "other-thread",
                "dead-lettered")

#: Dead-letter codes of records the fold did apply (it refused part of them itself).
FOLDED_CODES: frozenset[DeadLetterCode] = frozenset({"conflict"})


class UnknownVersion(OmError, ValueError):
    """The version has no dead-letter topic in the namespace, so no worker ever folded it."""


@dataclass(frozen=True)
class Selection:
    """Which records of the log belong to the export."""

    key: str  # the memory key
    thread: str | None  # None: every thread of the memory (a resource's whole memory)
    refused: frozenset[tuple[int, int]] = frozenset()  # (partition, offset) the worker refused


@dataclass
class ExportSummary:
    memory_key: str
    thread: str | None
    written: int = 0
    skipped: Tally[str] = field(default_factory=Tally)

    def line(self) -> str:
        """The one line `om export` prints to stderr."""
        skipped = ", ".join(f"{self.skipped[reason]} {reason}" for reason in SKIP_REASONS
                            if self.skipped[reason]) or "none"
        what = f"thread {self.thread!r}" if self.thread else f"memory {self.memory_key!r}"
        return f"om export: {plural(self.written, 'record')} of {what}; skipped: {skipped}"


def refused_positions(dead_letters: Iterable[bytes | None], log_topic: str) -> frozenset[tuple[int, int]]:
    """The (partition, offset) of every record of `log_topic` the worker dead-lettered without
    folding it (see `omstream.schemas.dead_letters.DeadLetter` for the record's shape); unreadable dead
    letters and those of other topics (a state record, say) name no log record."""
    positions = set()
    for raw in dead_letters:
        try:
            letter = DeadLetter.model_validate_json(raw or b"")
        except ValidationError:
            continue
        if letter.source.topic == log_topic and letter.code not in FOLDED_CODES:
            positions.add((letter.source.partition, letter.source.offset))
    return frozenset(positions)


def choose(key: bytes | None, value: bytes | None, position: tuple[int, int],
           selection: Selection) -> ConversationRecord | str:
    """The record, decoded, if it belongs to the export; otherwise why not (`SKIP_REASONS`)."""
    if key is None or key.decode("utf-8", "replace") != selection.key:
        return "other-memory"
    record = decode_input(value)
    if isinstance(record, DecodeFailure):
        return "undecodable"
    if isinstance(record, ModelResult):
        return "model-result"
    # A resource-wide deletion names no thread, and applies to every thread of the resource.
    if selection.thread is not None and record.thread_id not in (None, selection.thread):
        return "other-thread"
    if position in selection.refused:
        return "dead-lettered"
    return record


async def export(settings: Settings, *, thread: str | None, resource: str | None = None,
                 version: str | None = None, out: BinaryIO,
                 progress: Callable[[int, int], Any] | None = None) -> ExportSummary:
    """Write the memory's records to `out`, one JSON line each; what was written and skipped.

    Reads the one partition of `<ns>.log` that holds the memory (the producer's partitioner, as
    `OmClient` sends) from its start to its end offset taken at the start, then the version's
    dead-letter topic to its end: after the log, so it covers as much of what was read as the
    worker has folded.  `progress(done, total)` follows the reading of the log."""
    topics = Topics(settings.namespace, version) if version else Topics.of(settings)
    key = memory_key(settings.om, thread, resource)
    summary = ExportSummary(key, thread)
    layout = await partitions_of(settings.bootstrap, [topics.log, topics.dlq])
    if not layout.get(topics.dlq):
        raise UnknownVersion(f"no dead-letter topic {topics.dlq} in namespace {settings.namespace!r}: "
                             f"no worker folds version {topics.version!r} there")
    if not layout.get(topics.log):
        return summary
    raw_key = key.encode()
    # Only the memory's records are kept while reading: the partition holds other memories too.
    candidates = []
    async for record in read_until_end(settings.bootstrap, topics.log, [memory_partition(raw_key, layout[topics.log])],
                                 progress):
        if record.key == raw_key:
            candidates.append(record)
        else:
            summary.skipped["other-memory"] += 1
    letters = [record.value async for record in read_until_end(settings.bootstrap, topics.dlq, layout[topics.dlq])]
    selection = Selection(key, thread, refused_positions(letters, topics.log))
    sealer = sealer_of(settings, repair=False)
    await sealer.start()
    try:
        opener = Opener(sealer)
        await opener.prepare(record.value for record in candidates)
        write_chosen(((record.key, record.value, (record.partition, record.offset)) for record in candidates),
                     selection, opener, summary, out)
    finally:
        await sealer.stop()
    return summary


def write_chosen(records: Iterable[tuple[bytes | None, bytes | None, tuple[int, int]]], selection: Selection,
                 opener: Opener, summary: ExportSummary, out: BinaryIO) -> None:
    """Each record of the memory (key, value, position) opened, chosen and written to `out`;
    the ones left out counted in `summary` by reason.  `opener` has its keys loaded."""
    passed = opener.passed.copy()
    for raw_key, value, position in records:
        opened = value if value is None else opener.open(value, raw_key.decode("utf-8", "replace") if raw_key else None)
        if opened is None:
            continue
        chosen = choose(raw_key, opened, position, selection)
        if isinstance(chosen, str):
            summary.skipped[chosen] += 1
            continue
        out.write(encode(chosen) + b"\n")
        summary.written += 1
    # What the opener passed over here: shredded (a deleted memory's) or tampered records.
    summary.skipped.update(opener.passed - passed)
    out.flush()
