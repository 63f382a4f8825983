"""The bulk fold of a settled version (`omstream.replay.bulk_fold.BulkFold`) without a broker.

The reference is the live settled path computed in-process: every memory folded as live (its
answers only once the partition's history is read, as they reach the log's end, its records
held meanwhile).  The bulk fold answers a job as soon as the memory's next record would be held
behind it, except for the memories `folds_as_live` names; both must emit the same events.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta

import orjson

from omstream.limits import Limits
from omstream.pipeline.folding import FoldContext
from omstream.replay.bulk_fold import BulkFold, Record, folds_as_live
from omstream.schemas.codec import decode_job, encode
from omstream.schemas.control import StepStarted, ThreadDeleted
from omstream.schemas.jobs import ModelResult
from omstream.settings import Settings
from omstream.topics import Topics
from tests.helpers import T0, engine, message, scripted_result

TOPICS = Topics("om")
VERSION = "v2"


class Answers:
    """The scripted models, answering at once (a settled version's answers take no time)."""

    def __init__(self) -> None:
        self.asked = 0

    async def answer(self, job: bytes) -> ModelResult | None:
        self.asked += 1
        return scripted_result(decode_job(job), ms=0)


def history() -> list[Record]:
    """Two threads interleaved, a step after each message; t2 deleted half way, then talking on."""
    inputs = []
    for i in range(40):
        for thread in ("t1", "t2"):
            inputs += [message(i, thread, words=80),
                       StepStarted(thread_id=thread, step_number=0, at=T0 + timedelta(seconds=30 * i))]
        if i == 20:
            inputs.append(ThreadDeleted(thread_id="t2", at=T0 + timedelta(seconds=30 * i + 1)))
    return [Record(TOPICS.log, 0, offset, f"thread:{r.thread_id}".encode(), encode(r), [], None)
            for offset, r in enumerate(inputs)]


def fold(records: list[Record], deferred: set[bytes]) -> tuple[dict[str, list[dict]], int]:
    config = replace(engine(400, observation={"bufferTokens": 0.25}, reflection={"observationTokens": 500}),
                     version=VERSION, settled=True)
    answers = Answers()
    bulk = BulkFold(FoldContext(Settings(), TOPICS, config, Limits(), b"secret"), 0, answers, deferred)

    async def run() -> None:
        for record in records:
            await bulk.feed(record)
        await bulk.finish()

    asyncio.run(run())
    events: dict[str, list[dict]] = defaultdict(list)
    for out in bulk.take_outputs():
        assert out.topic == TOPICS.events, out.value[:300]
        event = orjson.loads(out.value)
        events[event["memoryKey"]].append({k: v for k, v in event.items() if k not in ("inputOffset", "inputLast")})
    return events, answers.asked


def test_the_bulk_fold_emits_what_the_live_settled_path_emits():
    records = history()
    live, live_asked = fold(records, {b"thread:t1", b"thread:t2"})
    deferred = {r.key for r in records if r.key and folds_as_live(r.value, VERSION)}
    bulk, bulk_asked = fold(records, deferred)
    kinds = {e["type"] for evs in live.values() for e in evs}
    print(f"{sum(map(len, live.values()))} events, {live_asked} answers; deferred {sorted(deferred)}")
    assert {"data-om-buffering-end", "data-om-activation", "om-memory-deleted"} <= kinds
    assert deferred == {b"thread:t2"}
    assert bulk == live and bulk_asked == live_asked
    # Without t2 folded as live its deletion would come after the answer it cancels.
    assert fold(records, set())[0]["thread:t2"] != live["thread:t2"]


def test_what_folds_as_live():
    assert folds_as_live(encode(ThreadDeleted(thread_id="t", at=T0)), VERSION)
    assert not folds_as_live(encode(message(1)), VERSION)
    job_result = {"type": "model-result", "version": VERSION}
    assert folds_as_live(orjson.dumps(job_result), VERSION)
    assert not folds_as_live(orjson.dumps({**job_result, "version": "other"}), VERSION)
    assert not folds_as_live(None, VERSION)
