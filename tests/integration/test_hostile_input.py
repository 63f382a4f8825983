"""Hostile input on the real broker: thousands of bad records, interleaved with valid traffic on
20 threads.  Every bad record must end in `<ns>.dlq` with a reason (found there by its own log
position), every valid message must reach its thread's context exactly once, the worker must never
restart, and every context request must answer 200."""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.error
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from omstream.infra.broker import free_port
from omstream.processes import start_child, stop_child
from omstream.schemas.codec import encode
from omstream.schemas.control import StepStarted
from omstream.schemas.jobs import ModelResult
from omstream.topics import Topics
from tests.helpers import text_of
from tests.integration.options import om_options
from tests.integration.support import read_all

pytestmark = pytest.mark.integration

THREADS = [f"h{i:02d}" for i in range(20)]
VALID_PER_THREAD = 20
BAD_RECORDS = 5000
OPTIONS = om_options(observation={"messageTokens": 1500, "bufferTokens": False})


def nested(levels: int) -> str:
    """A JSON object `levels` deep, as text (no encoder can be asked to build the deep ones)."""
    return '{"a":' * levels + "1" + "}" * levels


class Traffic:
    """The records to send, in order: (key, value, expected dead letter?) and the valid ids."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.base = datetime.now(UTC) - timedelta(hours=1)
        self.records: list[tuple[bytes, bytes, bool]] = []
        self.valid: dict[str, list[str]] = {t: [] for t in THREADS}
        self.kinds: dict[str, int] = {}
        self.serial = 0

    def message(self, thread: str, role: str = "user", **extra) -> dict:
        self.serial += 1
        body = {"id": f"{thread}-v{self.serial}", "threadId": thread, "resourceId": "u1", "role": role,
                "content": text_of(30 + self.serial % 40, self.serial),
                "createdAt": (self.base + timedelta(milliseconds=200 * self.serial)).isoformat()}
        return {**body, **extra}

    def add(self, kind: str, thread: str, value: bytes, *, bad: bool, key: str | None = None) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.records.append(((key or f"thread:{thread}").encode(), value, bad))

    def add_valid(self, thread: str, body: dict, kind: str = "valid message") -> None:
        self.valid[thread].append(body["id"])
        self.add(kind, thread, orjson.dumps(body), bad=False)

    def add_bad(self) -> None:
        rng, thread = self.rng, self.rng.choice(THREADS)
        kind = rng.randrange(14)
        if kind == 0:
            self.add("garbage bytes", thread, rng.randbytes(rng.randint(1, 300)) + b"{", bad=True)
        elif kind == 1:
            raw = orjson.dumps(self.message(thread)).replace(b'"content":"', b'"content":"\xff\xfe', 1)
            self.add("invalid utf-8", thread, raw, bad=True)
        elif kind == 2:
            field, value = rng.choice([("role", 7), ("createdAt", "yesterday"), ("content", 5),
                                       ("threadId", None), ("id", ""), ("createdAt", "2025-03-03T09:00:00")])
            self.add("wrong type", thread, orjson.dumps(self.message(thread, **{field: value})), bad=True)
        elif kind == 3:
            levels = rng.choice([64, 65, 100, 254, 255, 256, 300, 1022, 1023, 5000])
            body = orjson.dumps(self.message(thread)).decode()
            raw = body[:-1] + f',"metadata":{nested(levels)}}}'  # 1 + levels deep
            self.add("nested beyond the limit", thread, raw.encode(), bad=True)
        elif kind == 4:
            levels = rng.choice([100, 300, 1022])
            body = self.message(thread, role="tool")
            body["content"] = [{"type": "tool-result", "toolCallId": "c", "toolName": "t", "result": 0}]
            raw = orjson.dumps(body).decode().replace('"result":0', f'"result":{nested(levels)}')
            self.add("deep tool result", thread, raw.encode(), bad=True)
        elif kind == 5:
            body = self.message(thread, content="x" * rng.randint(100_001, 300_000))
            self.add("text too long", thread, orjson.dumps(body), bad=True)
        elif kind == 6:
            parts = [{"type": "text", "text": "p"}] * rng.randint(201, 400)
            self.add("too many parts", thread, orjson.dumps(self.message(thread, content=parts)), bad=True)
        elif kind == 7 and self.kinds.get("record too large", 0) < 20:
            body = self.message(thread, metadata={"blob": "y" * 600_000})
            self.add("record too large", thread, orjson.dumps(body), bad=True)
        elif kind == 8:
            ahead = timedelta(minutes=rng.choice([6, 60, 60 * 24 * 365]))
            body = self.message(thread, createdAt=(datetime.now(UTC) + ahead).isoformat())
            self.add("far-future time", thread, orjson.dumps(body), bad=True)
        elif kind == 9:
            forged = ModelResult(kind="observe", cycle_id=f"thread:{thread}#{rng.randint(1, 5)}",
                                 memory_key=f"thread:{thread}", thread_id=thread, request_hash="x",
                                 ok=True, model="scripted/observer", output="<observations>* 🔴 forged",
                                 started_at=self.base, completed_at=self.base)
            self.add("forged result", thread, encode(forged), bad=True)
        elif kind == 10:
            body = {"type": rng.choice(["om-telepathy", "model-job", "data-om-status", "x"]),
                    "threadId": thread, "schemaVersion": 1}
            self.add("unknown type", thread, orjson.dumps(body), bad=True)
        elif kind == 11:
            other = rng.choice([t for t in THREADS if t != thread])
            self.add("wrong key", thread, orjson.dumps(self.message(thread)), bad=True, key=f"thread:{other}")
        elif kind == 12 and self.valid[thread]:
            reused = rng.choice(self.valid[thread])
            body = {**self.message(thread), "id": reused}  # same id, other content
            self.add("duplicate id, other content", thread, orjson.dumps(body), bad=True)
        else:
            # A step for a message that never comes: applied at once (one ordered log), never held.
            step = StepStarted(thread_id=thread, step_number=0, at=self.base,
                               after_message_id=f"{thread}-never-{self.serial}")
            self.add("step for a message that never comes", thread, encode(step), bad=False)


def build_traffic(seed: int = 7) -> Traffic:
    traffic = Traffic(seed)
    # About one generated record in seven is a valid step (see Traffic.add_bad): send a fifth more.
    per_round = BAD_RECORDS * 6 // 5 // (VALID_PER_THREAD * len(THREADS)) + 1
    for i in range(VALID_PER_THREAD):
        for thread in THREADS:
            role = "user" if i % 2 == 0 else "assistant"
            traffic.add_valid(thread, traffic.message(thread, role=role))
            if i in (3, 11):  # valid records nested up to the limit (64 levels in all)
                body = traffic.message(thread, role="assistant")
                raw = orjson.dumps(body).decode()[:-1] + f',"metadata":{nested(63)}}}'
                traffic.valid[thread].append(body["id"])
                traffic.add("valid message nested to the limit", thread, raw.encode(), bad=False)
            for _ in range(per_round):
                traffic.add_bad()
    return traffic


async def produce(bootstrap: str, topic: str, records) -> list[tuple[int, int]]:
    """Send every record, in order, and return where each landed (partition, offset)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=2_000_000,
                                linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value, _ in records]
        return [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
    finally:
        await producer.stop()


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}
    except urllib.error.URLError:
        return 0, {}  # not listening yet


def test_hostile_records_are_dead_lettered_and_valid_traffic_survives(new_env):
    env = new_env(options=OPTIONS)
    worker = env.start_worker()
    topics = Topics(env.settings.namespace)
    traffic = build_traffic()
    bad = sum(is_bad for _, _, is_bad in traffic.records)
    assert bad >= BAD_RECORDS
    started = time.monotonic()
    positions = asyncio.run(produce(env.settings.bootstrap, topics.log, traffic.records))
    expected_dead = {pos for pos, (_, _, is_bad) in zip(positions, traffic.records) if is_bad}

    async def dead_letters(timeout: float = 240.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            letters = [orjson.loads(r.value) for r in await read_all(env.settings, topics.dlq, idle=0.3)]
            found = {(l["source"]["partition"], l["source"]["offset"]) for l in letters}
            if expected_dead <= found or time.monotonic() > deadline:
                return letters
            await asyncio.sleep(1.0)

    letters = asyncio.run(dead_letters())
    settings = replace(env.settings, web_port=free_port())
    web = start_child(settings, "serve", env.root / "serve.log")
    try:
        base = f"http://127.0.0.1:{settings.web_port}"
        deadline = time.monotonic() + 60
        while get(f"{base}/healthz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.3)
        answers = {t: get(f"{base}/threads/{t}/context?wait=60") for t in THREADS}
    finally:
        stop_child(web)
    elapsed = time.monotonic() - started

    found = {(l["source"]["partition"], l["source"]["offset"]): l for l in letters}
    codes: dict[str, int] = {}
    for letter in found.values():
        codes[letter["code"]] = codes.get(letter["code"], 0) + 1
    print(f"\nhostile input: {len(traffic.records)} records tried ({bad} bad, "
          f"{sum(map(len, traffic.valid.values()))} valid messages on {len(THREADS)} threads) "
          f"in {elapsed:.1f} s")
    print("  sent:", dict(sorted(traffic.kinds.items())))
    print("  dead letters by code:", dict(sorted(codes.items())))
    missing = expected_dead - set(found)
    assert not missing, f"{len(missing)} bad records not dead-lettered, e.g. {sorted(missing)[:5]}"
    assert all(letter["reason"] for letter in found.values())
    wrongly = [found[pos] for pos in sorted(set(found) - expected_dead)]
    assert not wrongly, [(l["code"], l["reason"][:200]) for l in wrongly[:5]]
    assert worker.proc.poll() is None, worker.tail()
    log = worker.log.read_text(errors="replace")
    assert "Traceback" not in log and "crashed" not in log.lower(), worker.tail(6000)
    for thread, ids in traffic.valid.items():
        status, body = answers[thread]
        assert status == 200, (thread, status)
        seen = [m["id"] for m in body["messages"]] + body["observedMessageIds"]
        assert sorted(seen) == sorted(ids), thread  # each valid message once, raw or observed
