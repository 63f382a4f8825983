"""Builders shared by the unit and integration tests."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from omstream.engine.fold import EngineConfig, fold, new_state
from omstream.models.capabilities import takes_attachments
from omstream.models.scripted import observe, reflect
from omstream.schemas.config import load_om_config
from omstream.schemas.jobs import ModelJob, ModelResult
from omstream.schemas.messages import Message

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray").split()


def text_of(n_words: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n_words))


def message(i: int, thread: str = "t1", *, words: int = 60, role: str | None = None) -> Message:
    return Message(
        id=f"{thread}-m{i}", thread_id=thread, resource_id="u1",
        role=role or ("user" if i % 2 == 0 else "assistant"),
        content=f"[{i}] " + text_of(words, i), created_at=T0 + timedelta(seconds=30 * i),
    )


def engine(message_tokens: int = 500, counter: str = "tokenx", **options) -> EngineConfig:
    """Scripted models, synchronous observation unless `observation`/`reflection` say otherwise."""
    observation = {"model": "scripted/observer", "messageTokens": message_tokens, "bufferTokens": False,
                   **options.pop("observation", {})}
    reflection = {"model": "scripted/reflector", **options.pop("reflection", {})}
    return EngineConfig(load_om_config({
        "observation": observation, "reflection": reflection, "tokenCounter": counter, **options,
    }), takes_attachments=takes_attachments)


def fold_inputs(inputs, config, key: str = "thread:t1"):
    """Fold `inputs` into a new memory of thread t1: (state, events, jobs, rejected)."""
    state = new_state(key, "t1", "u1")
    events, jobs, rejected = [], [], []
    for item in inputs:
        out = fold(state, item, config)
        state = out.state
        events += out.events
        jobs += out.jobs
        rejected += out.rejected
    return state, events, jobs, rejected


def until_a_job(config: EngineConfig):
    """Thread t1's messages, one by one, until the fold sends a job: (state, that fold's output)."""
    state = new_state("thread:t1", "t1", "u1")
    for i in range(40):
        out = fold(state, message(i), config)
        state = out.state
        if out.jobs:
            return state, out
    raise AssertionError("no job after 40 messages")


def scripted_result(job: ModelJob, *, ok: bool = True, output: str | None = None,
                    error: str | None = None, ms: int = 1500) -> ModelResult:
    """What the model agent answers for `job` with the scripted models (same rules, no broker)."""
    if ok and output is None:
        answer = reflect if job.kind in ("reflect", "buffer-reflection") else observe
        output = answer(job.messages[0].content, job.messages[1].content)
    return ModelResult(
        kind=job.kind, cycle_id=job.cycle_id, memory_key=job.memory_key, thread_id=job.thread_id,
        request_hash=job.request_hash, ok=ok, output=output if ok else None, error=error,
        model=job.model, started_at=job.created_at,
        completed_at=job.created_at + timedelta(milliseconds=ms),
        version=job.version, config_digest=job.config_digest,
    )

#: The long-thread scenario and its recordings (copied from the reference shelf, ours to ship).
LONG_THREAD = Path(__file__).resolve().parent / "fixtures" / "scenarios" / "long-thread"


def recorded_config(recording: Path) -> dict:
    """A recording's `# config` line, with the scripted models, as a settings object."""
    header = next(line for line in recording.read_text().splitlines() if line.startswith("# config "))
    options = json.loads(header.removeprefix("# config "))
    options["observation"]["model"] = "scripted/observer"
    options["reflection"]["model"] = "scripted/reflector"
    return {"observationalMemory": options}


async def until(condition, timeout: float = 5.0) -> None:
    """Wait (polling every millisecond) until `condition()` holds; fail after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.001)
