"""Checkpoints of `bench.quality`, so that a stopped run resumes where it stopped.

Everything lives under `.omstream/bench/quality/conv<N>/` (git-ignored), each file named by
the digest of what it depends on, so a change of any input makes a new file and the old one is
simply not read again:

* `calls-<models>.jsonl`: every successful Observer/Reflector answer of the ingest, one line per
  model call as it returns (with its prompt, for `--export-corpus`), keyed by the job's
  `requestHash` (model, messages, settings: what
  the project's own result cache keys by); the file is named by what the hash does not cover, a
  local model's weights and server-side sampling (`quality_answer.model_identity`).  A rerun folds the conversation again (the fold is
  pure and fast) and is served these answers instead of calling the model, so an ingest
  interrupted after its fifth call costs five calls once, not twice.
* `ingest-<key>.json`: the finished ingest (the context window and the figures reported),
  keyed by the conversation's messages, the memory configuration, the models, the engine's
  source and `BENCH_VERSION`.
* `answers-<condition>-<key>.jsonl`: one line per answered question, appended as each answer
  returns, keyed by the condition's context (its exact chat messages), the reader model and
  the answering protocol (`bench.quality_answer.protocol`); within the file a line is found
  by the digest of the question's prompt.  Condition `full`'s context is the whole
  conversation, so its answers depend only on the conversation, the reader and the questions:
  they are computed once and reused by every later run (the report says how many were).
* `steps-omstream+recall-<key>.jsonl`: condition `omstream+recall`'s reader calls, one line per
  call by the digest of its messages, so a question stopped between its recall calls resumes
  without asking twice (`bench.quality_recall`; its answers file is keyed as above, plus the cap,
  the handler's source and the conversation's messages, which the handler reads).

A failed model call is never written: the rerun asks again.  Lines are flushed as they are
written; a torn last line (a run killed mid-write) is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omstream.schemas.errors import OmError

__all__ = ["BENCH_VERSION", "CallCache", "CallLimit", "StopRequested", "Store", "digest", "request_of",
           "source_digest"]

#: Bump when a change of the bench itself changes what a checkpointed phase computes.
BENCH_VERSION = 1


class StopRequested(OmError):
    """The run stopped itself after `--stop-after-calls` model calls (a test hook, to show that
    a stopped run resumes)."""


def digest(*parts: Any) -> str:
    """A short content digest of JSON-able parts (order of dict keys does not matter)."""
    raw = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def source_digest(paths: Iterable[Path]) -> str:
    """Digest of source files: a changed prompt, parser or fold gives a new ingest key."""
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _read_lines(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a torn last line of a killed run
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _append_line(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        out.flush()


class Store:
    """One conversation's checkpoint directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, phase: str, key: str, suffix: str = ".json") -> Path:
        return self.root / f"{phase}-{key}{suffix}"

    def load(self, phase: str, key: str) -> dict[str, Any] | None:
        path = self.path(phase, key)
        if not path.exists():
            return None
        value = json.loads(path.read_text(encoding="utf-8"))
        return value if isinstance(value, dict) else None

    def save(self, phase: str, key: str, value: dict[str, Any]) -> Path:
        """Written whole or not at all (a temporary file renamed), so a kill never leaves half."""
        path = self.path(phase, key)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(value, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path

    def rows(self, phase: str, key: str) -> dict[str, dict[str, Any]]:
        """The lines of a JSON-lines phase by their `key` field (the last one wins)."""
        return {row["key"]: row for row in _read_lines(self.path(phase, key, ".jsonl")) if "key" in row}

    def append(self, phase: str, key: str, row: dict[str, Any]) -> None:
        _append_line(self.path(phase, key, ".jsonl"), row)


class CallCache:
    """Successful model results of the ingest by request hash, appended as they return."""

    def __init__(self, path: Path) -> None:
        self.path = path
        rows = [row for row in _read_lines(path)
                if isinstance(row.get("requestHash"), str) and isinstance(row.get("result"), str)]
        self.entries: dict[str, str] = {row["requestHash"]: row["result"] for row in rows}
        #: The prompt of each call, where the line has it (lines written before it was kept have
        #: not): what `--export-corpus` writes, whatever engine code reads the checkpoint.
        self.requests: dict[str, dict[str, Any]] = {
            row["requestHash"]: row["request"] for row in rows if isinstance(row.get("request"), dict)}
        self.hits = 0

    def original(self, request_hash: str) -> Any:
        """The stored result as the model gave it (its measured times), or None."""
        from omstream.schemas.jobs import ModelResult

        raw = self.entries.get(request_hash)
        return None if raw is None else ModelResult.model_validate_json(raw)

    def get(self, job: Any) -> Any:
        """The stored answer to `job`, addressed to it (as the project's result cache serves one)."""
        from omstream.pipeline.cache import answer_from

        stored = self.original(job.request_hash)
        if stored is None:
            return None
        self.hits += 1
        return answer_from(stored, job)

    def put(self, result: Any, job: Any = None) -> None:
        from omstream.schemas.codec import encode

        if not result.ok:
            return
        raw = encode(result).decode()
        self.entries[result.request_hash] = raw
        row: dict[str, Any] = {"requestHash": result.request_hash, "result": raw}
        if job is not None:
            row["request"] = request_of(job)
            self.requests[result.request_hash] = row["request"]
        _append_line(self.path, row)


def request_of(job: Any) -> dict[str, Any]:
    """What a call checkpoint keeps of a job besides its answer: the prompt and its settings."""
    return {"kind": job.kind, "model": job.model, "settings": job.settings,
            "messages": [m.model_dump(mode="json") for m in job.messages]}


class CallLimit:
    """Counts the model calls this run makes; past `stop_after` it stops the run (test hook)."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.made: dict[str, int] = {}

    def before(self, phase: str) -> None:
        if self.stop_after is not None and sum(self.made.values()) >= self.stop_after:
            raise StopRequested(f"stopped after {self.stop_after} model calls (--stop-after-calls), "
                                f"in phase {phase}; run again to resume")

    def count(self, phase: str) -> None:
        self.made[phase] = self.made.get(phase, 0) + 1
