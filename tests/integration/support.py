"""Reading a namespace's topics back in the integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from omstream.projections.feed import ProjectionFeed
from omstream.schemas.codec import decode_event
from omstream.topics import Topics, partitions_of


async def read_all(settings, topic: str, idle: float = 1.5) -> list:
    """Every record of a topic, from the start, until it has been quiet for `idle` seconds."""
    layout = await partitions_of(settings.bootstrap, [topic])
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in layout[topic]]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        end = await consumer.end_offsets(parts)
        out, quiet_since = [], time.monotonic()
        while True:
            batch = await consumer.getmany(timeout_ms=300)
            records = [r for rs in batch.values() for r in rs]
            out += records
            positions = [await consumer.position(tp) for tp in parts]
            done = all(pos >= end[tp] for pos, tp in zip(positions, parts))
            if records:
                quiet_since = time.monotonic()
            elif done and time.monotonic() - quiet_since > idle:
                return out
    finally:
        await consumer.stop()


async def events(settings) -> list:
    return [decode_event(r.value) for r in await read_all(settings, Topics(settings.namespace).events, idle=0.3)]


async def final_states(settings) -> dict[str, dict]:
    """The last state per memory key, read from the table's changelog (what a restart restores)."""
    from omstream.pipeline.storage import states_of

    latest: dict[bytes, bytes] = {}
    for r in await read_all(settings, f"{settings.app_id}-state-changelog", idle=0.3):
        if r.value is None:
            latest.pop(r.key, None)
        else:
            latest[r.key] = r.value
    return {key: {**state.model_dump(mode="json"), "seen": dict(state.seen)}
            for key, state in states_of(latest).items()}


#: The events that tell when a memory held inputs behind a cycle: two runs of the same input
#: differ there (it depends on when each model answered) and only there; they take a seq but no
#: id of the memory's count (`omstream.engine.ids`).
NOTICES = ("om-input-held", "om-input-released")


def decided(events: list) -> list:
    """The events but the notices: what the memory decided, the same in every run of its input."""
    return [e for e in events if e.type not in NOTICES]


def decided_state(state: dict) -> dict:
    """A final state as two runs of the same input must agree on it: its `seq` counts the events
    the memory decided (not the notices, whose number depends on when the models answered)."""
    rest = {k: v for k, v in state.items() if k != "notices"}
    return {**rest, "seq": state.get("seq", 0) - state.get("notices", 0)}


def expected_cycles(messages, counter, threshold: int) -> int:
    """An independent oracle: blocking cycles fire whenever the unobserved total reaches the threshold."""
    from omstream.engine.rules.tokens import count_message, count_messages

    cycles, pending = 0, []
    for m in messages:
        pending.append(count_message(m, counter))
        if count_messages(pending) >= threshold:
            cycles, pending = cycles + 1, []
    return cycles


async def settled_feed(settings, threads: dict[str, tuple[int, int]], *,
                       timeout: float = 120.0) -> ProjectionFeed:
    """A projection (fed by `<ns>.events` alone) that has seen, per thread, (messages accepted
    by the fold, completed cycles) and nothing in flight."""
    feed = ProjectionFeed(settings)
    await feed.start()
    task = asyncio.create_task(feed.run())

    def settled() -> bool:
        for thread, (total, cycles) in threads.items():
            view = feed.projection.threads.get(thread)
            if view is None or view.blocked or len(view.messages) < total or view.cycles < cycles:
                return False
        return True

    deadline = time.monotonic() + timeout
    while not settled() and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
    await asyncio.sleep(2.0)  # let any late event arrive before judging
    task.cancel()
    await feed.stop()
    return feed


class Server:
    """`om serve` as a child process on a free port: a projection rebuilt from `<ns>.events`."""

    def __init__(self, settings, log) -> None:
        from dataclasses import replace

        from omstream.infra.broker import free_port
        from omstream.processes import start_child

        self.settings = replace(settings, web_port=free_port())
        self.url = f"http://127.0.0.1:{self.settings.web_port}"
        self.log = log
        self.proc = start_child(self.settings, "serve", log)

    async def get(self, path: str, **params) -> tuple[int, dict | None]:
        """GET `path`: the status and the JSON body; the answer is checked against the OpenAPI
        document (tests/integration/openapi_check.py)."""
        import aiohttp
        import orjson

        from tests.integration.openapi_check import check_answer

        query = {k: str(v) for k, v in params.items()}
        async with aiohttp.ClientSession() as http:
            async with http.get(self.url + path, params=query) as r:
                body = await r.read()
                check_answer("GET", self.url + path, r.status, r.headers, body, query)
                return r.status, (orjson.loads(body) if r.content_type == "application/json" else None)

    async def post(self, path: str, body: bytes, **params) -> tuple[int, dict | None]:
        """POST `body` (as JSON) to `path`, checked against the OpenAPI document as `get` is."""
        import aiohttp
        import orjson

        from tests.integration.openapi_check import check_answer

        query = {k: str(v) for k, v in params.items()}
        async with aiohttp.ClientSession() as http:
            async with http.post(self.url + path, params=query, data=body,
                                 headers={"Content-Type": "application/json"}) as r:
                answer = await r.read()
                check_answer("POST", self.url + path, r.status, r.headers, answer, query)
                return r.status, (orjson.loads(answer) if r.content_type == "application/json" else None)

    async def ready(self, timeout: float = 60.0) -> None:
        """Wait until `/healthz` answers 200: the projection has caught up with the log."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if (await self.get("/healthz"))[0] == 200:
                    return
            except OSError:
                pass  # not listening yet
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise TimeoutError(f"om serve not ready: {self.log.read_text(errors='replace')[-2000:]}")
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        from omstream.processes import stop_child

        stop_child(self.proc)


@contextlib.contextmanager
def served(broker, root, options: str):
    """A namespace of `options` under `root`, its worker and `om serve` (ready): (env, server),
    both stopped on the way out.  The module-scoped fixture of the framework tests."""
    from tests.integration.conftest import Env

    env = Env(broker, root / "env", options)
    env.start_worker()
    server = Server(env.settings, root / "serve.log")
    try:
        asyncio.run(server.ready())
        yield env, server
    finally:
        server.stop()
        for worker in env.workers:
            worker.stop()


class EventWatcher:
    """Follows `<ns>.events` from the beginning while a test drives a conversation."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self.events: list = []
        self._consumer = None

    async def __aenter__(self) -> EventWatcher:
        topic = Topics(self.settings.namespace).events
        layout = await partitions_of(self.settings.bootstrap, [topic])
        deadline = time.monotonic() + 30
        while not layout.get(topic):  # a topic just created may not be in the metadata yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} has no partitions in the broker's metadata")
            await asyncio.sleep(0.2)
            layout = await partitions_of(self.settings.bootstrap, [topic])
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.bootstrap, group_id=None,
                                          enable_auto_commit=False, auto_offset_reset="earliest")
        await self._consumer.start()
        self._consumer.assign([TopicPartition(topic, p) for p in layout[topic]])
        return self

    async def __aexit__(self, *exc) -> None:
        await self._consumer.stop()

    async def wait_for(self, predicate, timeout: float = 60.0) -> list:
        """Read until `predicate(events)` holds; the events so far."""
        deadline = time.monotonic() + timeout
        while not predicate(self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met after {timeout}s; {len(self.events)} events read")
            batch = await self._consumer.getmany(timeout_ms=200)
            self.events += [decode_event(r.value) for rs in batch.values() for r in rs]
        return self.events


async def committed(settings, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on `topic` (-1: none), and the topic's end offsets."""
    layout = await partitions_of(settings.bootstrap, [topic])
    parts = [TopicPartition(topic, p) for p in layout[topic]]
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        out = {}
        for tp in parts:
            offset = await consumer.committed(tp)
            out[tp.partition] = -1 if offset is None else offset
        return out
    finally:
        await consumer.stop()


async def end_offsets(settings, topic: str) -> dict[int, int]:
    layout = await partitions_of(settings.bootstrap, [topic])
    parts = [TopicPartition(topic, p) for p in layout[topic]]
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=None)
    await consumer.start()
    try:
        return {tp.partition: end for tp, end in (await consumer.end_offsets(parts)).items()}
    finally:
        await consumer.stop()
