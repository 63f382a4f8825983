"""`om serve` start time against the history's size: cold (empty read model) and warm restart.

    python -m bench.serve_restart                          # 100,000 messages on 1,000 threads
    python -m bench.serve_restart --sizes 2000,5000 --threads 100  # a quick look
    python -m bench.serve_restart --help

What runs
    A single-node Kafka broker on free ports in a temporary directory and a fresh namespace
    (4 partitions).  The history is written straight to `<ns>.events` as the worker would write
    it: the bench folds the conversation offline with the engine's pure fold (`omstream.engine`,
    the worker's code without the broker round trips), answers every model job at once with the
    scripted observer and reflector, and produces each event, encoded as on the wire, keyed by
    its memory key.  Running the worker instead would measure the worker (minutes for 100,000
    messages on two cores); what matters here is how many events `om serve` has to read.  Each
    thread is an agent loop (user message, step, reply), ~100-token messages, async buffering
    with `messageTokens` 2000, so chunks are buffered and activated and the events are the
    lifecycle's mix, not only accepted messages.

    At each size (default 10k, 50k, 100k messages; the history grows from one to the next):
    1. cold: `om serve` on a new data directory (empty store) from spawn to `GET /healthz` 200;
    2. warm: that server stopped (SIGTERM) and started again on the same data directory.
    Both are the whole process start, Python imports included (printed as `import floor`: a
    Python process importing the CLI and the server's modules, and nothing else).

What is printed
    Per size: messages, events on the topic, cold and warm seconds to healthy, of the warm start
    the seconds spent loading the store (from the server's log: store opened to loaded), the
    server's resident memory once healthy, and the store's size on disk (with its WAL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from omstream import kafka
from omstream.engine.fold import EngineConfig, fold, new_state
from omstream.engine.rules.tokens import get_counter
from omstream.engine.state import MemoryState
from omstream.infra.broker import free_port
from omstream.models.capabilities import takes_attachments
from omstream.models.scripted import observe, reflect
from omstream.processes import start_child, stop_child
from omstream.schemas.codec import encode
from omstream.schemas.control import StepStarted
from omstream.schemas.jobs import ModelJob, ModelResult
from omstream.schemas.messages import Message
from omstream.settings import Settings
from omstream.topics import Topics

from .e2e_env import Options, start_namespace
from .fold_bench import REFLECT_KINDS, make_bodies

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)


def progress(text: str) -> None:
    print(f"[serve_restart {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def answer(job: ModelJob) -> ModelResult:
    """The model agent's answer with the scripted models, at once."""
    system, user = job.messages[0].content, job.messages[1].content
    output = reflect(system, user) if job.kind in REFLECT_KINDS else observe(system, user)
    return ModelResult(kind=job.kind, cycle_id=job.cycle_id, memory_key=job.memory_key, thread_id=job.thread_id,
                       request_hash=job.request_hash, ok=True, output=output, model=job.model,
                       started_at=job.created_at, completed_at=job.created_at + timedelta(milliseconds=1500),
                       version=job.version, config_digest=job.config_digest)


class History:
    """The conversation folded offline and its events produced to `<ns>.events`, in steps."""

    def __init__(self, settings: Settings, threads: int) -> None:
        self.settings, self.threads = settings, threads
        self.config = EngineConfig(settings.om, settings.version, takes_attachments=takes_attachments)
        self.bodies = make_bodies(200, 27, 96, get_counter("tokenx"))
        self.states: dict[str, MemoryState] = {}
        self.messages = self.events = 0

    def _fold(self, state: MemoryState, item: Any) -> tuple[MemoryState, list[Any]]:
        out = fold(state, item, self.config)
        events, pending = list(out.events), list(out.jobs)
        state = out.state
        while pending:
            out = fold(state, answer(pending.pop(0)), self.config)
            state, events, pending = out.state, events + list(out.events), pending + list(out.jobs)
        return state, events

    def _message_events(self, n: int) -> list[Any]:
        """The events of message number `n`: threads take turns, a step after each user message."""
        thread, i = f"h{n % self.threads}", n // self.threads
        key = f"thread:{thread}"
        state = self.states.get(key) or new_state(key, thread, "u1")
        at = T0 + timedelta(seconds=20 * i)
        message = Message(id=f"{thread}-m{i}", thread_id=thread, resource_id="u1",
                          role="user" if i % 2 == 0 else "assistant", created_at=at,
                          content=f"[{thread} {i}] {self.bodies[(n * 7) % len(self.bodies)]}")
        state, events = self._fold(state, message)
        if message.role == "user":
            state, more = self._fold(state, StepStarted(thread_id=thread, step_number=0, at=at,
                                                        after_message_id=message.id))
            events += more
        self.states[key] = state
        return events

    async def grow_to(self, messages: int) -> None:
        topic = Topics.of(self.settings).events
        producer = kafka.producer(self.settings, linger_ms=20, max_batch_size=1 << 20)
        await producer.start()
        try:
            pending = []
            while self.messages < messages:
                for event in self._message_events(self.messages):
                    pending.append(await producer.send(topic, encode(event), key=event.memory_key.encode()))
                    self.events += 1
                self.messages += 1
                if len(pending) > 5000:
                    await asyncio.gather(*pending)
                    pending = []
                if self.messages % 10_000 == 0:
                    progress(f"history: {self.messages} messages, {self.events} events")
            await asyncio.gather(*pending)
        finally:
            await producer.stop()


async def healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while True:
            with contextlib.suppress(OSError):
                async with http.get(url + "/healthz") as response:
                    if response.status == 200:
                        return
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"om serve not healthy: {log.read_text(errors='replace')[-2000:]}")
            await asyncio.sleep(0.05)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def start_serve(settings: Settings, log: Path) -> tuple[float, float, subprocess.Popen[bytes]]:
    """Spawn `om serve`; (seconds to healthy, resident MB then, the process)."""
    settings = replace(settings, web_port=free_port())
    t0 = time.monotonic()
    proc = start_child(settings, "serve", log)
    await healthy(f"http://127.0.0.1:{settings.web_port}", proc, log)
    return time.monotonic() - t0, rss_mb(proc.pid), proc


def load_seconds(log: Path) -> float:
    """From the server's log: the store opened to its views, seqs and offsets loaded."""
    at = {}
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record["msg"] in ("read model store opened", "read model loaded"):
                at[record["msg"]] = datetime.fromisoformat(record["ts"])
    return (at["read model loaded"] - at["read model store opened"]).total_seconds()


def import_floor() -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import omstream.cli.app, omstream.projections.serve, aiokafka"],
                   capture_output=True, check=True)
    return time.monotonic() - t0


async def bench(root: Path, sizes: list[int], threads: int) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        settings = await start_namespace(root, stack, Options(counter="tokenx", message_tokens=2000), "sr")
        history = History(settings, threads)
        rows = []
        for size in sizes:
            t0 = time.monotonic()
            await history.grow_to(size)
            progress(f"{size} messages, {history.events} events written in {time.monotonic() - t0:.0f} s")
            served = replace(settings, data_dir=root / f"serve-{size}")
            cold_s, cold_mb, proc = await start_serve(served, root / f"cold-{size}.log")
            stop_child(proc)
            warm_s, warm_mb, proc = await start_serve(served, root / f"warm-{size}.log")
            stop_child(proc)
            store = sum(f.stat().st_size for f in (served.data_dir / "readmodel").rglob("slot-*.sqlite*"))
            rows.append({"messages": size, "threads": threads, "events": history.events,
                         "coldS": round(cold_s, 2), "warmS": round(warm_s, 2),
                         "warmLoadS": round(load_seconds(root / f"warm-{size}.log"), 2), "coldRssMb": round(cold_mb),
                         "warmRssMb": round(warm_mb), "storeMb": round(store / 2**20, 1)})
            progress(json.dumps(rows[-1]))
        return {"importFloorS": round(import_floor(), 2), "rows": rows}


def format_report(report: dict[str, Any]) -> str:
    head = ("messages", "threads", "events", "cold s", "warm s", "warm load s", "cold RSS MB", "warm RSS MB",
            "store MB")
    keys = ("messages", "threads", "events", "coldS", "warmS", "warmLoadS", "coldRssMb", "warmRssMb", "storeMb")
    rows = [head] + [tuple(str(r[k]) for k in keys) for r in report["rows"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["om serve, spawn to GET /healthz 200 (cold: empty read model; warm: restarted on it)"]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows]
    lines.append(f"import floor (the CLI and the server's modules): {report['importFloorS']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve_restart", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,50000,100000", help="history sizes in messages, growing")
    parser.add_argument("--threads", type=int, default=1_000, help="threads the messages are spread over")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", type=Path, help="work in this (new) folder and keep it: the servers' logs, stores")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="om-serve-bench-")))
        report = asyncio.run(bench(root, sizes, args.threads))
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
