"""`om export --resource` on a real broker: a resource memory's history, every thread of it in
the log's order, as one conversation file that `om simulate` folds into the same memory.

Two users write through `OmClient` in resource scope, user u1 in two threads interleaved; the
export of u1 holds exactly u1's records, both threads, in the order they were sent (the memory's
one partition), and none of u2's; `--thread` narrows it to one thread of u1.  Simulating the
export gives the bytes that simulating what was sent gives.  (No worker runs: an export reads
the log, and which records the worker refused; here it refused none.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta

import pytest

from omstream.client import OmClient
from omstream.conversations.files import read_conversation
from omstream.conversations.simulation import format_timeline, simulate
from omstream.schemas.codec import encode
from omstream.schemas.messages import Message
from tests.helpers import T0, text_of
from tests.integration.options import om_options

pytestmark = pytest.mark.integration

OPTIONS = om_options(scope="resource", observation={"messageTokens": 300, "bufferTokens": False,
                                                    "maxTokensPerBatch": 250})


def said(n: int, resource: str, thread: str) -> Message:
    return Message(id=f"{resource}-{n}", thread_id=thread, resource_id=resource,
                   role="user" if n % 2 == 0 else "assistant", content=f"[{thread} {n}] " + text_of(40, n),
                   created_at=T0 + timedelta(seconds=20 * n))


SENT = [said(n, r, f"{r}-{'ab'[(n // 2) % 2]}") for n in range(16) for r in ("u1", "u2")]


def om_export(env, out, *argv: str) -> str:
    """Run `om export`, its output into `out`; the summary line it prints."""
    done = subprocess.run([sys.executable, "-m", "omstream.cli", "--config", str(env.config), "export", *argv],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out.write_bytes(done.stdout)
    return done.stderr.decode().strip().splitlines()[-1]


def test_export_by_resource_holds_every_thread_of_the_resource_and_nothing_else(new_env, tmp_path):
    env = new_env(options=OPTIONS)

    async def produce() -> None:
        async with OmClient(env.settings) as client:
            for message in SENT:
                await client.send_message(message)

    asyncio.run(produce())
    whole, one = tmp_path / "u1.jsonl", tmp_path / "u1-a.jsonl"
    line = om_export(env, whole, "--resource", "u1")
    print(line)
    assert line.startswith("om export: 16 records of memory 'resource:u1'")
    mine = [m for m in SENT if m.resource_id == "u1"]
    assert whole.read_bytes() == b"".join(encode(m) + b"\n" for m in mine)
    assert {m.thread_id for m in mine} == {"u1-a", "u1-b"}
    print(om_export(env, one, "--resource", "u1", "--thread", "u1-a"))
    assert [r.id for r in read_conversation(one)] == [m.id for m in mine if m.thread_id == "u1-a"]

    from omstream.schemas.config import load_om_config
    from omstream.settings import read_config_file

    om = load_om_config(read_config_file(env.config))
    exported = asyncio.run(simulate(read_conversation(whole), om))
    direct = asyncio.run(simulate(mine, om))
    assert list(exported.states) == ["resource:u1"]
    assert format_timeline(exported.events) == format_timeline(direct.events)
    assert [e.model_dump() for e in exported.events] == [e.model_dump() for e in direct.events]
    print(f"{len(exported.events)} events, {len(exported.jobs)} model calls, threads "
          f"{sorted({e.thread_id for e in exported.events})}")
