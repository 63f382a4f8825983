"""The fold agent with a namespace key, on the real broker (issue 31): what it writes to
`<ns>.events`, `<ns>.jobs` and the state changelog carries no plaintext, opens with the
namespace's keys, and a thread deletion shreds the thread's content.

The producer here is plain (the edges' sealing is another piece) and only the fold agent runs
(`--role fold`): its jobs are read back, not answered.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import orjson
import pytest

from omstream.client import OmClient
from omstream.crypto import KeyNotLoaded
from omstream.crypto.errors import Shredded
from omstream.crypto.sealing import sealer_of
from omstream.schemas.control import ThreadDeleted
from omstream.topics import Topics
from tests.helpers import T0, message
from tests.integration.support import read_all

pytestmark = pytest.mark.integration

KEY = "fold-namespace-key-" + "k" * 32


def test_the_fold_writes_only_ciphertext_and_a_deletion_shreds(new_env):
    env = new_env(message_tokens=300, partitions=1)
    env.settings = replace(env.settings, namespace_key=KEY)
    env.start_worker(role="fold", env={"OM_NAMESPACE_KEY": KEY})
    topics = Topics.of(env.settings)
    msgs = [message(i, "t1", words=60) for i in range(6)]

    async def scenario():
        async with OmClient(env.settings) as client:
            await client.send_messages(msgs)

            async def jobs() -> list:
                return await read_all(env.settings, topics.jobs, idle=0.3)

            await _until(lambda: _nonempty(jobs), timeout=90)
            events = await read_all(env.settings, topics.events, idle=0.3)
            job_records = await jobs()
            changelog = await read_all(env.settings, topics.state_changelog(env.settings.app_id), idle=0.3)
            sealer = sealer_of(env.settings, repair=False)
            await sealer.start()
            try:
                opened = [sealer.open(r.value, "thread:t1") for r in events]
                accepted = [r.value for r in events if b'"om-message-accepted"' in r.value]
                await client.send_control(ThreadDeleted(thread_id="t1", at=T0))

                async def deleted() -> bool:
                    return any(b"om-memory-deleted" in r.value
                               for r in await read_all(env.settings, topics.events, idle=0.3))

                await _until(deleted, timeout=60)

                async def shredded() -> bool:
                    await sealer.ring.catch_up()  # type: ignore[union-attr]
                    try:
                        sealer.open(accepted[0], "thread:t1")
                    except Shredded:
                        return True
                    return False

                # The shred follows the send: wait for it (a fixed second was a guess of an idle machine).
                await _until(shredded, timeout=60)
            finally:
                await sealer.stop()
        return events, job_records, changelog, opened

    events, jobs, changelog, opened = asyncio.run(scenario())
    words = [m.content.split()[1].encode() for m in msgs]  # "[i] <word> ...": a word of each
    written = [r.value or b"" for r in (*events, *jobs, *changelog)]
    print(f"{len(events)} events, {len(jobs)} jobs, {len(changelog)} state records")
    assert events and jobs and changelog
    for value in written:
        assert b"[0] " not in value and b"[3] " not in value, value[:200]
    assert all(w not in v for w in words for v in written if b'"om1' in v or b"omSealed" in v)
    assert any(b"[0] " in (v or b"") for v in opened)  # what the read side will open


async def _nonempty(read) -> bool:
    return bool(await read())


async def _until(condition, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.5)


def test_deleting_one_thread_of_a_resource_keeps_the_rest_readable(new_env):
    """Resource scope: the deleted thread's messages are shredded, the other thread's stay, and
    the memory's state, rewritten under the resource's next key, still reads after the shred."""
    from omstream.pipeline.sealed_fold import unwrapped
    from omstream.pipeline.storage import SEP, load_state
    from tests.integration.options import om_options

    env = new_env(options=om_options(scope="resource", observation={"messageTokens": 100_000}), partitions=1)
    env.settings = replace(env.settings, namespace_key=KEY)
    env.start_worker(role="fold", env={"OM_NAMESPACE_KEY": KEY})
    topics = Topics.of(env.settings)
    memory = "resource:u1"

    async def events() -> list:
        return await read_all(env.settings, topics.events, idle=0.3)

    async def scenario():
        async with OmClient(env.settings) as client:
            await client.send_messages([message(i, t) for i in range(2) for t in ("t1", "t2")])
            await _until(lambda: _count(events, b'"om-message-accepted"', 4), timeout=90)
            await client.send_control(ThreadDeleted(thread_id="t1", resource_id="u1", at=T0))
            await _until(lambda: _count(events, b'"om-memory-deleted"', 1), timeout=60)
        # The shred follows the send, the state's store too: looked at until both are seen (a
        # fixed second was a guess of an idle machine), then judged below.
        sealer = sealer_of(env.settings, repair=False)
        await sealer.start()
        try:
            deadline = asyncio.get_running_loop().time() + 60
            while True:
                await sealer.ring.catch_up()  # type: ignore[union-attr]
                readable, state, latest = await look(sealer)
                if (readable == {"t1": False, "t2": True} and state is not None
                        and {m.thread_id for m in state.state.pending} == {"t2"}):
                    break
                if asyncio.get_running_loop().time() > deadline:
                    break  # judged as it is
                await asyncio.sleep(0.5)
        finally:
            await sealer.stop()
        return readable, state, latest

    async def look(sealer):
        written = await events()
        changelog = await read_all(env.settings, topics.state_changelog(env.settings.app_id), idle=0.3)
        readable: dict[str, bool] = {}
        for r in written:
            data = orjson.loads(r.value)
            if data["type"] == "om-message-accepted":
                owner = f"thread:{memory}/{data['threadId']}"
                try:
                    sealer.open(r.value, owner)
                    readable[data["threadId"]] = True
                except Shredded:
                    readable[data["threadId"]] = False
        latest = {r.key: r.value for r in changelog}
        try:
            stored = {k: sealer.open_blob(unwrapped(v), k.split(SEP, 1)[0].decode())
                      for k, v in latest.items() if v is not None}
        except (Shredded, KeyNotLoaded):  # the store after the deletion not in yet: under the key it rolled
            return readable, None, latest
        state = load_state(stored.get, lambda p: sorted(k for k in stored if k.startswith(p)), memory.encode())
        return readable, state, latest

    readable, state, latest = asyncio.run(scenario())
    assert readable == {"t1": False, "t2": True}
    assert state is not None and {m.thread_id for m in state.state.pending} == {"t2"}
    assert all(b"[0] " not in (v or b"") for v in latest.values())


async def _count(read, marker: bytes, n: int) -> bool:
    return sum(marker in r.value for r in await read()) >= n
