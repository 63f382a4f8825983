"""One partition of a settled version's history, folded in-process: no round trip per job.

A settled version's worker (`omstream.replay.replay`) folds every record through the live
path: a job goes to `<ns>.jobs`, its answer comes back at the log's end, and meanwhile the
memory holds the rest of its history (`omstream.engine.fold.holds`), which the answer releases.
Here the same records go through the same code (`omstream.pipeline.folding.fold_record`: limits,
decoding, dead letters, the fold, the size of every output), and a job's answer is folded as
soon as the fold would hold the memory's next record behind it: live, that record and the
rest would wait in the state and be folded right after the answer, so folding the answer
first, then the record, decides the same (the semantics of `om simulate`, which the replay
tests compare with the live settled path).

That holds as long as nothing in the memory's history is applied *while* a cycle is in flight.
Two kinds of record are: a deletion (it cancels the cycle and drops what the memory held) and
a result of this version already in the log (a replay of this name ran before).  A memory
with one of them in its history (`deferred`, found by the caller before the fold) is folded
exactly as live: its records go through the fold, which holds them, and its answers are folded
once the partition's history is read, in the order its jobs were made, as they would reach
the log's end.  So is a memory whose next record the fold would not hold while a job of it
waits (a cycle that does not block it), from that record on.

An answer is folded as the record it would be on the log (encoded, signed), at the memory's
last folded offset: the state's position stays the last record of the log it folded, so the
live worker that takes over folds every later record (and no earlier one).  Its events carry
that offset (`inputOffset`); live they carry the offset the answer got at the log's end.

`Answers` answers a job (`omstream.replay.bulk` has the cache and the model calls); None
means this very cycle's answer is on the log already, so the memory is deferred and folds that
record where the log has it.

With a namespace key (`sealer`), records are opened as the live fold opens them (a record of a
shredded memory is passed over) and the outputs and states sealed as it seals them
(`omstream.pipeline.sealed_fold`), but a bulk replay never shreds: the deletions it reads were
shredded when the live version folded them, and the keys they left current belong to what came
after.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import orjson

from omstream.crypto.errors import CryptoError
from omstream.crypto.sealing import PLAIN, Sealer
from omstream.engine.fold import Input, addressed, holds
from omstream.schemas.codec import DecodeFailure, decode_input, encode
from omstream.schemas.jobs import ModelResult

from ..pipeline.folding import MAX_OUTPUT_BYTES, FoldContext, Outcome, fold_record
from ..pipeline.memories import Memories, StateWrite
from ..pipeline.sealed_fold import BatchKeys, StateBlobs, batch_keys
from ..pipeline.sending import OutputRecord
from ..pipeline.signing import HEADER, sign

__all__ = ["Answers", "BulkFold", "Record", "folds_as_live"]


@dataclass(frozen=True, slots=True)
class Record:
    """A log record as `fold_record` reads it (`Consumed`); `timestamp` in seconds, as Faust's."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] | None
    timestamp: float | None


def folds_as_live(value: bytes | None, version: str) -> bool:
    """Whether a log record makes its memory fold as live (`deferred`): a deletion, or a result
    of `version`.

    Read on the raw bytes, never decoded: a record that merely names a deletion (a message
    about one) only makes its memory fold as live, which is exact, just slower.  Results are
    written by the model agents alone, as orjson writes them, so their version reads as such."""
    raw = value or b""
    return b"-deleted" in raw or (b"model-result" in raw and b'"version":' + orjson.dumps(version) in raw)


class Answers(Protocol):
    """Answers a job record of `<ns>.jobs`: a result, or None when the log has it already."""

    async def answer(self, job: bytes) -> ModelResult | None: ...


class BulkFold:
    """The memories of one partition, folded from an empty store (a new version).

    `feed` every record of the partition in log order, then `finish`; `outputs` collects what
    to send (events and dead letters; jobs are answered here, never sent), to be taken with
    `take_outputs` as it grows.  `writes` are the memories' state records, in the worker's
    layout (`Memories.writes`)."""

    def __init__(self, ctx: FoldContext, partition: int, answers: Answers, deferred: set[bytes],
                 sealer: Sealer = PLAIN) -> None:
        self.ctx, self.partition, self.answers = ctx, partition, answers
        # Every key resolved so far (the states are sealed with them at the end); never rolled.
        self.keys = BatchKeys(sealer, shredding=False)
        # A new version: nothing stored to read.
        self.memories = Memories(lambda _p, _k: None, lambda _p, _prefix: (), MAX_OUTPUT_BYTES,
                                 blobs=StateBlobs(self.keys) if sealer.enabled else None)
        self._jobs: dict[bytes, deque[bytes]] = {}  # memory key -> its jobs not answered yet, in order
        self._deferred = set(deferred)  # memory keys folded as live (see the module docstring)
        self.outputs: list[OutputRecord] = []
        self.records = 0  # records fed
        self.answered = 0  # answers folded

    async def feed(self, record: Record) -> None:
        """Fold one record of the partition (in log order), answering first what the memory's
        pending jobs would have answered before it (see the module docstring)."""
        self.records += 1
        key = record.key or b""
        if self.keys.enabled:
            found = await batch_keys(self.keys.sealer, [record], shredding=False)
            self.keys.current.update(found.current)
        if self._jobs.get(key) and key not in self._deferred:
            await self._before(key, record)
        self._take(fold_record(self.ctx, record, self.memories, self.keys))

    @property
    def passed_over(self) -> int:
        """Records of shredded memories passed over."""
        return self.keys.passed_over

    async def finish(self) -> None:
        """Answer every job still waiting (the deferred memories' and the last ones')."""
        for key in list(self._jobs):
            while self._jobs.get(key):
                await self._answer_next(key)

    def take_outputs(self) -> list[OutputRecord]:
        taken, self.outputs = self.outputs, []
        return taken

    def writes(self) -> list[StateWrite]:
        """Every memory's state records (after `finish`); `memories.stored()` has the states."""
        return self.memories.writes()

    async def _before(self, key: bytes, record: Record) -> None:
        try:
            value = self.keys.open_input(key.decode("utf-8", "replace"), record.value)
        except CryptoError:
            return  # passed over or dead-lettered by `fold_record`: the state does not change
        decoded = decode_input(value)
        if isinstance(decoded, DecodeFailure) or (isinstance(decoded, ModelResult)
                                                   and not addressed(decoded, self.ctx.config)):
            return  # dead-lettered or another version's: the memory's state does not change
        while self._jobs.get(key):
            if not self._holds(key, decoded):
                self._deferred.add(key)  # live, this record comes before the answer
                return
            if not await self._answer_next(key):
                return

    def _holds(self, key: bytes, decoded: Input) -> bool:
        state = self.memories.get(key, self.partition)
        return state is not None and holds(state, decoded, self.ctx.config)

    async def _answer_next(self, key: bytes) -> bool:
        """Answer the memory's next job and fold the answer; False when the log has the answer
        (the memory is deferred: it folds that record where the log has it)."""
        job = self._jobs[key].popleft()
        if self.keys.enabled:  # sealed by `fold_record` under the memory's key, just now
            job = self.keys.sealer.open(job, key.decode()) or job
        result = await self.answers.answer(job)
        if result is None:
            self._deferred.add(key)
            return False
        self._fold_answer(key, result)
        return True

    def _fold_answer(self, key: bytes, result: ModelResult) -> None:
        """Fold `result` as the signed log record it would be, without moving the memory's
        position (see the module docstring)."""
        state = self.memories.get(key, self.partition)
        assert state is not None, "a job's memory has a state"
        topic = self.ctx.topics.log
        position = state.offsets.get(topic, -1)
        value = encode(result)
        record = Record(topic, self.partition, position, key, value, [(HEADER, sign(self.ctx.result_key, value))],
                        None)
        # `fold_record` skips what the state has folded already (a redelivery): the answer
        # takes the memory's own position, so it is shown a state without one.
        self.memories.put(key, state.model_copy(update={"offsets": {
            t: o for t, o in state.offsets.items() if t != topic}}))
        outcome = fold_record(self.ctx, record, self.memories, self.keys)
        if outcome.state is None:
            self.memories.put(key, state)
        self.answered += 1
        self._take(outcome)

    def _take(self, outcome: Outcome) -> None:
        if outcome.state is not None:
            self.memories.put(outcome.key, outcome.state)
        jobs = self.ctx.topics.jobs
        for out in outcome.records:
            if out.topic == jobs:
                self._jobs.setdefault(out.key, deque()).append(out.value)
            else:
                self.outputs.append(out)
