"""bench.quality says whether its Observer calls ran under the answer's grammar, so its parse
shares (clean / recovered / failed) can be read as the grammar's or the lenient parser's."""

import asyncio
from datetime import UTC, datetime

from bench import quality_ingest
from bench.quality_report import observer_grammar
from omstream.schemas.jobs import ChatMessage, ModelJob, ModelResult, request_hash

T = datetime(2025, 3, 3, tzinfo=UTC)


def job(settings: dict, kind: str = "observe") -> ModelJob:
    messages = (ChatMessage(role="user", content="hi"),)
    return ModelJob(kind=kind, cycle_id="c", memory_key="thread:t", thread_id="t", generation=0,
                    model="local/qwen2.5-1.5b", messages=messages, settings=settings,
                    request_hash=request_hash("local/qwen2.5-1.5b", messages, settings), created_at=T)


class Checkpointed:
    """A call checkpoint that has every answer."""

    def original(self, _hash):
        return ModelResult(kind="observe", cycle_id="c", memory_key="thread:t", thread_id="t", request_hash="h",
                           ok=True, output="x", model="local/qwen2.5-1.5b", started_at=T, completed_at=T)

    def get(self, _job):
        return self.original(None)


def test_each_call_row_says_whether_the_grammar_was_sent():
    rows = [asyncio.run(quality_ingest._run(j, Checkpointed(), None, 1.0))[1]  # type: ignore[arg-type]
            for j in (job({"grammar": "root ::= \"x\""}), job({}, "reflect"))]
    assert [(r["kind"], r["grammar"]) for r in rows] == [("observe", True), ("reflect", False)]


def test_the_report_field_reads_the_observer_calls():
    assert observer_grammar([{"kind": "observe", "grammar": True}, {"kind": "buffer", "grammar": True},
                             {"kind": "reflect", "grammar": False}]) is True
    assert observer_grammar([{"kind": "observe", "grammar": False}]) is False
    assert observer_grammar([{"kind": "observe", "grammar": True}, {"kind": "observe", "grammar": False}]) is None
    assert observer_grammar([{"kind": "observe"}]) is None  # checkpointed before rows said so
    assert observer_grammar([]) is None
