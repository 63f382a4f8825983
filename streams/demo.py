"""`om demo`: the whole path on one machine, offline, with the scripted observer.

Starts (or reuses) the local broker, creates the topics, starts the worker and the web server
as child processes, produces the demo conversation, prints the lifecycle events until every
message is accounted for, then prints the context URL and keeps serving until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from .processes import busy_ports, local_broker, start_child, stop_child
from .settings import Settings

__all__ = ["run_demo"]


def _get(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except OSError:
        return None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_demo(settings: Settings, conversation: Path, *, stay: bool) -> int:
    from .cli import tail
    from .conversation import read_conversation
    from .topics import ensure_topics

    broker = local_broker(settings)
    owned_broker = broker.pid() is None
    # Before anything starts: a taken port would otherwise surface minutes later as a worker or
    # web server that never comes up (or a stranger answering on the web port).
    busy = busy_ports(settings, broker=owned_broker)
    for reason in busy:
        print(reason, file=sys.stderr)
    if busy:
        return 1
    # Ctrl-C or SIGTERM stops what the demo started, even when a shell that started it in the
    # background left SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    # A fresh namespace per run: the broker keeps earlier runs' logs, and a demo must show its own.
    settings = replace(settings, namespace=f"{settings.namespace}-{time.strftime('%Y%m%d-%H%M%S')}")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    print("1/5 resolving Kafka from Maven Central and starting the broker ...", flush=True)
    if owned_broker:
        broker.start()
    asyncio.run(broker.wait_ready())
    asyncio.run(ensure_topics(settings))
    print(f"    broker ready at {broker.bootstrap}; namespace {settings.namespace}", flush=True)
    print("2/5 starting the worker and the web server ...", flush=True)
    worker_log = settings.data_dir / "worker.log"
    log_start = worker_log.stat().st_size if worker_log.exists() else 0
    children = [start_child(settings, "worker", worker_log),
                start_child(settings, "serve", settings.data_dir / "web.log")]
    base = f"http://{settings.web_host}:{settings.web_port}"
    try:
        deadline = time.monotonic() + 60
        while _get(f"{base}/healthz") is None:
            if time.monotonic() > deadline or any(c.poll() is not None for c in children):
                print(f"the web server did not come up; see {settings.data_dir / 'web.log'}", file=sys.stderr)
                return 1
            time.sleep(0.5)
        if not _worker_ready(worker_log, log_start, children[0]):
            print(f"the worker did not become ready; see {worker_log}", file=sys.stderr)
            return 1
        records = read_conversation(conversation)
        threads = sorted({m.thread_id for m in records})
        print(f"3/5 playing {len(records)} messages of {len(threads)} thread(s) as an agent loop "
              "(message, step, reply, turn end) ...", flush=True)
        asyncio.run(_play(settings, records))
        print("4/5 lifecycle events (the observer is the scripted local model):", flush=True)
        done = asyncio.run(_follow(settings, base, threads, len(records), tail))
        print(f"5/5 context windows{'' if done else ' (still settling)'}:")
        for thread in threads:
            ctx = _get(f"{base}/threads/{thread}/context?wait=0") or {}
            print(f"    {base}/threads/{thread}/context  -> {len(ctx.get('observedMessageIds', []))} "
                  f"messages observed, {len(ctx.get('messages', []))} raw")
        if not stay:
            return 0 if done else 1
        print("serving; press Ctrl-C to stop the worker, the web server and the broker", flush=True)
        while all(c.poll() is None for c in children):
            time.sleep(1)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for child in children:
            stop_child(child)
        if owned_broker:
            broker.stop()


def _worker_ready(log: Path, start: int, worker, timeout: float = 120) -> bool:
    """Wait until this run's worker can call models ("model agent ready": litellm imported), so
    the conversation is played to a live worker rather than queued for a cold one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker.poll() is None:
        with open(log, "rb") as f:
            f.seek(start)
            if b"model agent ready" in f.read():
                return True
        time.sleep(0.5)
    return False


async def _play(settings: Settings, messages: list, pause: float = 0.6) -> None:
    """Play the conversation as an agent loop, pausing after each step so background buffering
    has time to work before the threshold is reached."""
    from .client import OmClient

    async with OmClient(settings) as client:
        await client.play(messages, after_step=lambda _: asyncio.sleep(pause))


async def _follow(settings: Settings, base: str, threads: list[str], total: int, tail) -> bool:
    """Print events until every message is observed or raw in a settled context (≤ 3 min)."""
    printer = asyncio.create_task(tail(settings, thread=None, from_beginning=True, as_json=False,
                                       count=None, statuses=False, messages=False))
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            await asyncio.sleep(1)
            views = [await asyncio.to_thread(_get, f"{base}/threads/{t}/context?wait=0") for t in threads]
            if all(views) and not any(v["blocked"] for v in views):
                seen = sum(len(v["observedMessageIds"]) + len(v["messages"]) for v in views)
                if seen == total and any(v["observedMessageIds"] for v in views):
                    await asyncio.sleep(1)
                    return True
        return False
    finally:
        printer.cancel()
