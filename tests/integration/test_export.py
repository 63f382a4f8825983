"""`om export` of a live thread, and `om simulate` of the export: the same decisions as the worker.

Two threads are written through the broker as an agent loop writes them: messages, steps (more
than one per turn, which `om simulate`'s synthesized loop never makes) and turn ends, with a
command, a reused message id (refused by the fold itself), a message from the future and a
record that is not JSON (both refused by the worker, to the dead-letter topic).  The export of
one thread must be exactly its folded history, in log order; simulating it with the same
options (blocking cycles only: bufferTokens false, so a model's speed changes nothing) must
write the live worker's events for the thread, but for what time makes different.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from omstream.cli import main
from omstream.client import OmClient
from omstream.conversations.files import read_conversation
from omstream.conversations.simulation import simulate
from omstream.schemas.codec import decode_input, encode
from omstream.schemas.control import ControlRecord, StepStarted, ThreadPatched, TurnEnded
from omstream.schemas.jobs import ModelResult
from omstream.schemas.messages import Message
from tests.helpers import T0, text_of
from tests.integration.options import om_options
from tests.integration.support import EventWatcher, decided, read_all

pytestmark = pytest.mark.integration

OPTIONS = om_options(observation={"messageTokens": 400, "bufferTokens": False}, reflection={"observationTokens": 500})

TURNS = 8


def turn(thread: str, n: int) -> list:
    """One turn as an agent writes it: the user's message, step 0, a reply, step 1 (a step our
    synthesized loop never makes), a second reply, the turn's end."""
    at = T0 + timedelta(minutes=n)

    def said(i: int, role: str) -> Message:
        return Message(id=f"{thread}-{n}-{i}", thread_id=thread, resource_id="u1", role=role,
                       content=f"[{thread} {n}.{i}] " + text_of(30 + (n * 17 + i * 11) % 60, n * 3 + i),
                       created_at=at + timedelta(seconds=10 * i))

    def step(number: int, seconds: int) -> StepStarted:
        return StepStarted(thread_id=thread, resource_id="u1", step_number=number,
                           at=at + timedelta(seconds=seconds))

    return [said(0, "user"), step(0, 0), said(1, "assistant"), step(1, 15), said(2, "assistant"),
            TurnEnded(thread_id=thread, resource_id="u1", at=at + timedelta(seconds=25))]


def extras(n: int) -> list:
    """What thread A's log also holds after turn n: a command, a message id reused with other
    content (the fold refuses it: a `conflict` dead letter, and it stays in the export since the
    fold applied it), a message dated tomorrow (the worker refuses it: `future-time`) and bytes
    that are not JSON (`not-json`)."""
    at = T0 + timedelta(minutes=n, seconds=50)
    return {
        2: [ThreadPatched(thread_id="A", resource_id="u1", title="Trip planning", at=at)],
        3: [Message(id="A-1-1", thread_id="A", resource_id="u1", role="assistant", content="other words",
                    created_at=at)],
        4: [Message(id="A-future", thread_id="A", resource_id="u1", role="user", content="from tomorrow",
                    created_at=datetime.now(UTC) + timedelta(days=1))],
        5: [b"{not json"],
    }.get(n, [])


REFUSED = {"A-future"}  # by the worker, before the fold
REUSED = "A-1-1"  # by the fold


async def send(client: OmClient, record: Message | ControlRecord | bytes) -> None:
    if isinstance(record, bytes):  # raw bytes are thread A's (`extras`)
        await client.send_raw(client.topics.log, b"thread:A", record)
    elif isinstance(record, Message) and record.id in REFUSED:
        # The client refuses it before sending (`RefusedRecord`): written raw, for the worker to refuse.
        await client.send_raw(client.topics.log, b"thread:A", encode(record))
    elif isinstance(record, Message):
        await client.send_message(record)
    else:
        await client.send_control(record)


def folded(thread: str, steps: int, messages: int):
    """The thread's accepted messages and step statuses are out, and no cycle is in flight."""
    def check(events) -> bool:
        if not events or not events[-1].input_last:
            return False
        mine = [e for e in events if e.thread_id == thread]
        count = {t: sum(e.type == t for e in mine) for t in (
            "om-message-accepted", "data-om-status", "data-om-observation-start",
            "data-om-observation-end", "data-om-observation-failed")}
        return (count["om-message-accepted"] >= messages and count["data-om-status"] >= steps
                and count["data-om-observation-start"]
                == count["data-om-observation-end"] + count["data-om-observation-failed"])
    return check


async def dead_letters(settings, at_least: int, timeout: float = 30.0) -> list:
    """The dead-letter topic, once it holds `at_least` records."""
    deadline = time.monotonic() + timeout
    while True:
        letters = await read_all(settings, f"{settings.namespace}.dlq", idle=0.3)
        if len(letters) >= at_least or time.monotonic() > deadline:
            return letters
        await asyncio.sleep(0.3)


def om_export(env, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omstream.cli", "--config", str(env.config), "export", *argv],
                          capture_output=True, timeout=120)


def test_simulating_an_export_makes_the_live_threads_events(new_env, tmp_path):
    env = new_env(options=OPTIONS)
    env.start_worker()
    sent = {"A": [], "B": []}
    for n in range(TURNS):
        sent["A"] += turn("A", n) + extras(n)
        sent["B"] += turn("B", n)
    accepted = {t: sum(isinstance(r, Message) and r.id not in REFUSED | {REUSED} for r in records)
                for t, records in sent.items()}

    async def drive() -> tuple[list, list]:
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            for n in range(TURNS):  # the threads' turns interleave in the log
                for thread in ("A", "B"):
                    for record in turn(thread, n) + (extras(n) if thread == "A" else []):
                        await send(client, record)
            for thread in ("A", "B"):
                await watcher.wait_for(folded(thread, 2 * TURNS, accepted[thread]), timeout=120)
            letters = await dead_letters(env.settings, at_least=3)
            return watcher.events, letters

    live, letters = asyncio.run(drive())
    assert sorted(orjson.loads(r.value)["code"] for r in letters) == [
        "conflict", "future-time", "not-json"], env.logs()

    done = om_export(env, "--thread", "A")
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    expected = [r for r in sent["A"] if not isinstance(r, bytes)
                and not (isinstance(r, Message) and r.id in REFUSED)]
    assert lines == [encode(r).decode() for r in expected]  # the wire records, in log order
    assert not any(isinstance(decode_input(line.encode()), ModelResult) for line in lines)
    summary = done.stderr.decode().strip().splitlines()[-1]
    assert summary.startswith(f"om export: {len(expected)} records of thread 'A'; skipped: ")
    assert "1 undecodable" in summary and "1 dead-lettered" in summary and "model-result" in summary

    conversation = tmp_path / "A.jsonl"
    conversation.write_bytes(done.stdout)
    sim = asyncio.run(simulate(read_conversation(conversation), env.settings.om))
    # Inputs held live behind a cycle (om-input-*) depend on when the model answered; the
    # simulation settles every call first, so it holds none.  The rest is the same (renumbered
    # by the holds, when there were any).
    mine, decided = without_holds([e for e in live if e.thread_id == "A"])
    assert [e.type for e in sim.events] == [e.type for e in mine]
    assert [decided(e) for e in sim.events] == [decided(e) for e in mine]
    assert len(sim.rejected) == 1 and REUSED in sim.rejected[0]  # as the fold refused it live

    # `om simulate` itself reads the export the same way
    out = tmp_path / "events.jsonl"
    assert main(["simulate", str(conversation), "--config", str(env.config), "--out", str(out)]) == 0
    assert [orjson.loads(line)["type"] for line in out.read_bytes().splitlines()] == [e.type for e in mine]

    unknown = om_export(env, "--thread", "C")
    assert unknown.returncode == 2 and b"no records of thread 'C'" in unknown.stderr and not unknown.stdout
    unknown = om_export(env, "--thread", "A", "--version", "never-replayed")
    assert unknown.returncode == 2 and b"no worker folds version 'never-replayed'" in unknown.stderr


#: What the model's speed changes: a live cycle takes its measured time, a simulated one 0 ms (and
#: a later cycle may start that much later on the memory's clock, which never goes back).
TIME_FIELDS = frozenset({"startedAt", "completedAt", "durationMs"})


def without_holds(events: list) -> tuple[list, Callable[[Any], dict]]:
    """The live events but the holds (`support.NOTICES`), and what to compare of an event: its
    `substance`, without its `seq` when holds took some seqs (its ids count only the others)."""
    kept = decided(events)
    if len(kept) == len(events):
        return kept, substance
    return kept, lambda e: {k: v for k, v in substance(e).items() if k != "seq"}


def substance(event) -> dict:
    """What the fold decided: the event's kind, position and id, and its data but for time (the
    envelope's `eventTime`, `inputOffset` and `inputLast` are the live log's)."""
    data = event.data.model_dump(mode="json", by_alias=True)
    return {"type": event.type, "seq": event.seq, "eventId": event.event_id,
            **{name: value for name, value in data.items() if name not in TIME_FIELDS}}
