"""Deleted means gone (issue 31, acceptance 1 and 2): crypto-shredding on the real broker.

Two namespaces with a namespace key, a worker and `om serve` each:

- thread scope: thread `doomed` (every message carries its secret) observed, reflected,
  extracted and titled, its model answers cached, then `thread-deleted`; thread `kept` beside it;
- resource scope: user `r1`'s thread `a` deleted while its thread `b` stays; user `r2` deleted
  whole (`resource-deleted`).

After the window (evidence: the deleted memories' wrapped keys are gone from `<ns>.keys` read from
its beginning), a scan of every topic of the namespace (keys, values, headers) and of every file
of the worker's and the server's data directories finds none of the deleted secrets, and none of
the kept ones either (they are sealed); the kept memories are intact through `om serve`; and a replay of the namespace, which refolds
the whole log (the shredded records included), passes the deleted memory's records over without
a dead letter or a stop and reproduces the kept memory's events byte for byte.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from omstream.client import OmClient
from omstream.crypto import sealer_of
from omstream.crypto.book import DK
from omstream.crypto.opening import Opener
from omstream.schemas.codec import decode_event
from omstream.schemas.control import ResourceDeleted, ThreadDeleted
from omstream.schemas.messages import Message
from omstream.topics import Topics
from tests.helpers import T0, text_of
from tests.integration.options import om_options
from tests.integration.support import Server, read_all
from tests.integration.test_replay import run_replay, without_positions

pytestmark = pytest.mark.integration

NAMESPACE_KEY = "shredding-test-namespace-key-" + "k" * 32
WINDOW_MS = 3000
EXTRACT = [{"name": "Preferences", "instructions": "What the user likes."}]


def options(scope: str) -> str:
    return om_options(
        settings={"namespace_key": NAMESPACE_KEY, "shred_window_ms": WINDOW_MS},
        scope=scope,
        observation={"messageTokens": 300, "bufferTokens": False, "threadTitle": True, "extract": EXTRACT},
        reflection={"observationTokens": 250})


def secret(name: str) -> str:
    return f"SECRET{name.upper()}{uuid.uuid4().hex[:10]}"


def conversation(thread: str, resource: str, mark: str, n: int = 14) -> list[Message]:
    """`n` messages of ~60 words, each carrying `mark` (so it lands in every observation)."""
    return [Message(id=f"{thread}-m{i}", thread_id=thread, resource_id=resource,
                    role="user" if i % 2 == 0 else "assistant",
                    content=f"[{i}] my locker code is {mark}. " + text_of(60, i),
                    created_at=T0 + timedelta(seconds=30 * i)) for i in range(n)]


class OpenedEvents:
    """`<ns>.events` read from the beginning and opened with the namespace's keys."""

    def __init__(self, settings) -> None:
        self.settings = settings

    async def read(self) -> list:
        sealer = sealer_of(self.settings, repair=False)
        await sealer.start()
        try:
            records = await read_all(self.settings, Topics.of(self.settings).events, idle=0.3)
            opener = Opener(sealer)
            await opener.prepare(r.value for r in records)
            # A deleted memory's event no longer opens: passed over, as `om serve` does.
            return [decode_event(value) for r in records if (value := opener.open(r.value, r.key.decode()))]
        finally:
            await sealer.stop()

    async def wait_for(self, predicate, timeout: float = 120.0) -> list:
        deadline = time.monotonic() + timeout
        while True:
            events = await self.read()
            if predicate(events):
                return events
            assert time.monotonic() < deadline, (
                f"condition not met after {timeout}s; {len(events)} events: "
                f"{sorted(Counter((e.thread_id, e.type) for e in events).items())}; failures: "
                f"{[getattr(e.data, 'error', None) for e in events if e.type.endswith('-failed')][:3]}")
            await asyncio.sleep(1.0)


def ended(events, thread: str, operation: str) -> int:
    """Observation (or reflection) cycles of the thread that ended."""
    return sum(1 for e in events if e.thread_id == thread and e.type == "data-om-observation-end"
               and e.data.operation_type == operation)


async def scan_topics(settings, secrets: list[str]) -> dict[str, int]:
    """Records per topic of the namespace; fails naming the topic where a secret was readable."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if settings.namespace in t]
    finally:
        await admin.close()
    counts: dict[str, int] = {}
    for topic in sorted(names):
        records = await read_all(settings, topic, idle=0.3)
        counts[topic] = len(records)
        for r in records:
            blobs = [r.key or b"", r.value or b"", *(v or b"" for _, v in (r.headers or ()))]
            for s in secrets:
                assert not any(s.encode() in b for b in blobs), f"{s} readable in {topic} at offset {r.offset}"
    return counts


#: What `om serve` keeps of live memories to answer at once: their views in clear (a deleted
#: memory's rows are erased from these files, `projections/store/store.py`).
CLEAR_AT_REST = ("readmodel", "search")


def scan_files(roots: list[Path], secrets: list[str], *, live: bool = False) -> int:
    """Every file under `roots`; `live`: the secrets of live memories, which only the server's
    views may hold in clear."""
    files = [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()
             and not (live and set(CLEAR_AT_REST) & set(p.parts))]
    for path in files:
        data = path.read_bytes()
        for s in secrets:
            assert s.encode() not in data, f"{s} readable in {path}"
    return len(files)


def scan_logs(root: Path, secrets: list[str]) -> int:
    """The worker's and the server's logs: content is never logged."""
    logs = list(root.rglob("*.log"))
    for path in logs:
        text = path.read_text(errors="replace")
        for s in secrets:
            assert s not in text, f"{s} in the log {path}"
    return len(logs)


async def wrapped_keys(settings) -> dict[bytes, str]:
    """The wrapped data keys left in `<ns>.keys` (read from its beginning): record key -> owner."""
    latest: dict[bytes, bytes | None] = {}
    for r in await read_all(settings, Topics.of(settings).keys, idle=0.2):
        latest[r.key] = r.value
    return {k: orjson.loads(v)["memoryKey"] for k, v in latest.items() if v is not None and k.startswith(DK.encode())}


async def stored_keys(settings) -> set[bytes]:
    """The record keys of every wrapped key the broker still serves, superseded or not: a
    tombstone hides a key from readers at once, compaction removes its bytes later."""
    return {r.key for r in await read_all(settings, Topics.of(settings).keys, idle=0.2)
            if r.value is not None and r.key.startswith(DK.encode())}


async def live_keys(settings, owners: list[str]) -> set[bytes]:
    return {k for k, owner in (await wrapped_keys(settings)).items() if owner in owners}


async def wait_keys_gone(settings, ids: set[bytes], timeout: float = 90.0) -> float:
    """Until none of the wrapped keys `ids` (those that sealed the deleted content) is left in
    `<ns>.keys` (a deletion leaves the memory a successor key, which sealed none of it)."""
    start = time.monotonic()
    while left := ids & await stored_keys(settings):
        assert time.monotonic() - start < timeout, f"{len(left)} wrapped keys still in the topic"
        await asyncio.sleep(1.0)
    return time.monotonic() - start


def test_a_deleted_thread_leaves_every_topic_and_every_data_directory(new_env, tmp_path):
    env = new_env(options=options("thread"))
    worker = env.start_worker()
    doomed, kept = secret("doomed"), secret("kept")
    opened = OpenedEvents(env.settings)

    async def converse():
        async with OmClient(env.settings) as client:
            for a, b in zip(conversation("doomed", "u1", doomed), conversation("kept", "u2", kept)):
                await client.send_messages([a, b])
        return await opened.wait_for(lambda es: all(
            ended(es, t, "reflection") >= 1 and ended(es, t, "observation") >= 2
            for t in ("doomed", "kept")))

    live = asyncio.run(converse())
    server = Server(env.settings, tmp_path / "serve.log")
    try:
        asyncio.run(server.ready())
        status, before = asyncio.run(server.get("/threads/doomed/context"))
        assert status == 200 and doomed in orjson.dumps(before).decode(), "the server reads the sealed memory"

        async def delete():
            sealing = await live_keys(env.settings, ["thread:doomed"])
            assert sealing, "the thread's content was sealed under a key of its own"
            async with OmClient(env.settings) as client:
                await client.send_control(ThreadDeleted(thread_id="doomed", resource_id="u1",
                                                        at=T0 + timedelta(hours=1)))
            await opened.wait_for(lambda es: any(e.type == "om-memory-deleted" and e.thread_id == "doomed"
                                                 for e in es))
            return await wait_keys_gone(env.settings, sealing)

        gone_after = asyncio.run(delete())
        _, kept_view = asyncio.run(server.get("/threads/kept/context"))
        assert kept in orjson.dumps(kept_view).decode(), "the kept memory is intact"
        status, _ = asyncio.run(server.get("/threads/doomed/context"))
        assert status == 404
    finally:
        server.stop()
    worker.stop()

    counts = asyncio.run(scan_topics(env.settings, [doomed, kept]))
    files = scan_files([env.settings.data_dir], [doomed])
    scan_files([env.settings.data_dir], [kept], live=True)
    logs = scan_logs(tmp_path, [doomed, kept])
    print(f"\nwrapped key gone {gone_after:.1f} s after the deletion (window {WINDOW_MS} ms); {logs} logs; "
          f"scanned {sum(counts.values())} records in {len(counts)} topics and {files} files of the worker "
          "and the server: no secret (the kept one only in the server's live views)")

    # Acceptance 2: a worker on an empty disk refolds the whole log, the deleted thread's sealed
    # records included: they are passed over, nothing is dead-lettered, nothing stops.
    dlq_before = len(asyncio.run(read_all(env.settings, Topics.of(env.settings).dlq, idle=0.3)))
    replayed = run_replay(env.config, "again")
    assert replayed, "the replay ran to the log's end"
    again = Topics(env.settings.namespace, "again")
    assert len(asyncio.run(read_all(env.settings, again.dlq, idle=0.3))) == 0
    assert len(asyncio.run(read_all(env.settings, Topics.of(env.settings).dlq, idle=0.3))) == dlq_before
    live_kept = _by_memory(asyncio.run(read_all(env.settings, Topics.of(env.settings).events, idle=0.3)))
    replay_kept = _by_memory(asyncio.run(read_all(env.settings, again.events, idle=0.3)))
    assert without_positions(replay_kept["thread:kept"]) == without_positions(live_kept["thread:kept"])
    assert "thread:doomed" not in replay_kept or all(
        e["type"] != "data-om-observation-end" for e in replay_kept["thread:doomed"])
    print(f"replay: kept memory {len(replay_kept['thread:kept'])} events, equal to the live ones; "
          f"live events {len(live)}")


def _by_memory(records) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    seen: set[str] = set()
    for r in records:
        event = orjson.loads(r.value)
        if event["eventId"] not in seen:
            seen.add(event["eventId"])
            out[r.key.decode()].append(event)
    return out


def test_a_thread_of_a_resource_and_a_whole_resource_are_shredded(new_env, tmp_path):
    env = new_env(options=options("resource"))
    env.start_worker()
    gone_a, kept_b, gone_c, kept_d = secret("threada"), secret("threadb"), secret("resourcec"), secret("threadd")
    opened = OpenedEvents(env.settings)

    async def converse():
        async with OmClient(env.settings) as client:
            for a, b, c, d in zip(conversation("a", "r1", gone_a), conversation("b", "r1", kept_b),
                                  conversation("c", "r2", gone_c), conversation("d", "r3", kept_d)):
                await client.send_messages([a, b, c, d])
        # r1 reflected too: its reflections' text holds both threads' sections.
        return await opened.wait_for(lambda es: all(ended(es, t, "observation") >= 1
                                                    for t in ("a", "b", "c", "d"))
                                     and ended(es, "a", "reflection") + ended(es, "b", "reflection") >= 1)

    asyncio.run(converse())
    server = Server(env.settings, tmp_path / "serve.log")
    try:
        asyncio.run(server.ready())

        async def delete():
            sealing = await live_keys(env.settings, ["resource:r1", "resource:r2", "thread:resource:r1/a",
                                                     "thread:resource:r2/c"])
            assert len(sealing) == 4, "each owner's content was sealed under a key of its own"
            async with OmClient(env.settings) as client:
                await client.send_control(ThreadDeleted(thread_id="a", resource_id="r1", at=T0 + timedelta(hours=1)))
                await client.send_control(ResourceDeleted(resource_id="r2", at=T0 + timedelta(hours=1)))
            await opened.wait_for(lambda es: sum(e.type == "om-memory-deleted" for e in es) >= 2)
            return await wait_keys_gone(env.settings, sealing)

        gone_after = asyncio.run(delete())
        _, view = asyncio.run(server.get("/threads/b/context"))
        assert kept_b in orjson.dumps(view).decode(), "thread b of r1 is intact"
        assert gone_a not in orjson.dumps(view).decode(), "thread a's text left r1's memory"
        # Time travel: at no point of r1's history does thread b's window show a word of a.
        _, now = asyncio.run(server.get("/threads/b/context", asOf=0))
        for seq in range(1, now["lastSeq"] + 1):
            _, past = asyncio.run(server.get("/threads/b/context", asOf=seq))
            assert gone_a not in orjson.dumps(past).decode(), f"thread a's text in b's window as of {seq}"
    finally:
        server.stop()
    for w in env.workers:
        w.stop()
    counts = asyncio.run(scan_topics(env.settings, [gone_a, gone_c, kept_b, kept_d]))
    files = scan_files([env.settings.data_dir], [gone_a, gone_c])
    scan_files([env.settings.data_dir], [kept_b, kept_d], live=True)
    scan_logs(tmp_path, [gone_a, gone_c, kept_b, kept_d])
    print(f"\nresource scope: keys gone {gone_after:.1f} s after the deletions; scanned "
          f"{sum(counts.values())} records in {len(counts)} topics and {files} files: no secret")

    # The replay passes the shredded records over; a memory no deletion touched comes out byte
    # for byte the same.  r1 cannot: its deleted thread's messages shaped its cycles, and they
    # are gone from history too (what shredding means); its replay keeps b and never a.
    run_replay(env.config, "again")
    again = Topics(env.settings.namespace, "again")
    assert len(asyncio.run(read_all(env.settings, again.dlq, idle=0.3))) == 0
    live_events = _by_memory(asyncio.run(read_all(env.settings, Topics.of(env.settings).events, idle=0.3)))
    replayed = _by_memory(asyncio.run(read_all(env.settings, again.events, idle=0.3)))
    assert without_positions(replayed["resource:r3"]) == without_positions(live_events["resource:r3"])
    server = Server(env.settings, tmp_path / "serve-again.log")
    try:
        asyncio.run(server.ready())
        _, view = asyncio.run(server.get("/threads/b/context", version="again"))
    finally:
        server.stop()
    text = orjson.dumps(view).decode()
    assert kept_b in text and gone_a not in text
    print(f"replay: r3 {len(replayed['resource:r3'])} events equal to the live ones; r1's thread b intact")
