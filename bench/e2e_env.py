"""The environment `bench.e2e` measures: its options, a broker on free ports, the topics of a fresh
namespace and the `om worker` children (one `all`, or fold workers and a models worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.e2e_stats import worker_rss_kb
from omstream import kafka
from omstream.infra.broker import Broker, free_port
from omstream.processes import start_child, stop_child
from omstream.settings import Settings, load_settings
from omstream.topics import ensure_topics


# --- options ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Options:
    threads: int = 100            # runs 1 and 2: threads ...
    messages: int = 100           # ... times messages per thread
    tokens: int = 200             # tokens per message (under the configured counter)
    message_tokens: int = 3000    # observation.messageTokens: cycles happen every ~15 messages
    loads: tuple[int, ...] = (200, 1000)
    load_seconds: float = 3.0     # how long each offered load is produced
    load_threads: int = 20        # half message-only, half agent-loop
    checkpoints: tuple[int, ...] = (100, 1_000, 10_000)
    counter: str = "tokenx"
    seed: int = 7
    stall: float = 120.0          # fail when no awaited event arrives for this long
    fold_workers: int = 0         # 0: one `om worker` (role all); N: N `--role fold` + one `--role models`
    model_latency_ms: int = 0     # each scripted model call takes this long (modelSettings.latencyMs)
    model_concurrency: int | None = None  # [omstream] model_concurrency (None: the default)
    state: bool = True            # run 5 (a growing memory's state bytes)
    encrypt: bool = False         # a namespace key: every memory's content sealed (crypto-shredding)
    out: Path | None = None
    keep: bool = False


QUICK = dict(threads=10, messages=20, loads=(100,), load_seconds=3.0, load_threads=10,
             checkpoints=(20, 100))


# --- the environment: broker, namespace, worker ----------------------------------------------------
CONFIG = """
[omstream]
namespace = "{namespace}"
bootstrap = "{bootstrap}"
partitions = 4
data_dir = "{data}"

[observationalMemory]
tokenCounter = "{counter}"

[observationalMemory.observation]
model = "scripted/observer"
messageTokens = {message_tokens}

[observationalMemory.reflection]
model = "scripted/reflector"
"""
#: Every worker of the namespace signs and checks model results with this key (each has a data
#: directory of its own, which would otherwise make a key of its own).
RESULT_KEY = "e2e-bench-shared-result-key"


class BenchError(RuntimeError):
    """The benchmark could not go on (worker died, nothing arrived); the message says why."""


@dataclass
class Env:
    """What one benchmark run set up; `cleanup` undoes it (also on Ctrl-C and failures).
    `workers` are (name, process, log): one `all` worker, or fold workers and a models one."""

    root: Path
    settings: Settings
    workers: list[tuple[str, subprocess.Popen, Path]]

    @property
    def worker(self) -> subprocess.Popen:
        return self.workers[0][1]

    @property
    def worker_log(self) -> Path:
        return self.workers[0][2]

    def worker_tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {name} ({log}):\n" + log.read_text(errors="replace")[-chars:]
                         for name, _, log in self.workers if log.exists())

    def check_worker(self) -> None:
        for name, worker, _ in self.workers:
            if worker.poll() is not None:
                raise BenchError(f"worker {name} exited with code {worker.returncode}:\n"
                                 f"{self.worker_tail()}")

    def rss(self) -> dict[str, int]:
        """worker_rss_kb summed over every worker."""
        each = [worker_rss_kb(worker.pid) for _, worker, _ in self.workers]
        return {key: sum(e[key] for e in each) for key in ("rss_kb", "peak_kb", "processes")}


def config_text(options: Options, namespace: str, bootstrap: str, data: Path) -> str:
    """CONFIG for `options`, with `model_concurrency` and the scripted models' `latencyMs` when
    set (CONFIG keeps its placeholders: other benches format it themselves)."""
    text = CONFIG.format(namespace=namespace, bootstrap=bootstrap, data=data, counter=options.counter,
                         message_tokens=options.message_tokens)
    if options.model_concurrency is not None:
        text = text.replace("\n[observationalMemory]\n",
                            f"model_concurrency = {options.model_concurrency}\n\n[observationalMemory]\n", 1)
    if options.encrypt:
        # A key made for this run only: the bench measures the cost of sealing, not key handling.
        text = text.replace("\n[observationalMemory]\n",
                            f'namespace_key = "{os.urandom(24).hex()}"\n\n[observationalMemory]\n', 1)
    if options.model_latency_ms:
        for role in ("observer", "reflector"):
            text = text.replace(f'model = "scripted/{role}"\n', f'model = "scripted/{role}"\n'
                                f"modelSettings = {{ latencyMs = {options.model_latency_ms} }}\n", 1)
    return text


def worker_roles(options: Options) -> list[str]:
    """The roles of the workers to start: one `all`, or N `fold` and one `models`."""
    if options.fold_workers == 0:
        return ["all"]
    return ["fold"] * options.fold_workers + ["models"]


async def start_namespace(root: Path, stack: contextlib.ExitStack, options: Options, prefix: str) -> Settings:
    """A broker under `root` (stopped by `stack`) and a fresh namespace `<prefix><hex>` on it,
    configured by `config_text`, its topics created."""
    broker = Broker(root / "kafka", port=free_port(), controller_port=free_port())
    broker.start()
    stack.callback(broker.stop)
    await broker.wait_ready(timeout=120)
    config = root / "om.toml"
    config.write_text(config_text(options, f"{prefix}{uuid.uuid4().hex[:8]}", broker.bootstrap, root / "data"))
    settings = load_settings(config)
    await ensure_topics(settings)
    return settings


async def start_env(root: Path, options: Options, stack: contextlib.ExitStack) -> Env:
    """Broker, topics and the workers under `root`; each registered on `stack` to be stopped."""
    progress(f"starting a broker (data in {root})")
    settings = await start_namespace(root, stack, options, "e2e")
    workers = []
    for index, role in enumerate(worker_roles(options)):
        name = f"{role}{index}" if role == "fold" else role
        log = root / f"worker-{name}.log"
        env = {"OM_ROLE": role, "OM_RESULT_KEY": RESULT_KEY, "OM_DATA_DIR": str(root / "data" / name)}
        worker = start_child(settings, "worker", log, env=env)
        stack.callback(stop_child, worker)
        progress(f"worker {name} pid {worker.pid}, log {log}")
        workers.append((name, worker, log))
    return Env(root, settings, workers)


def progress(text: str) -> None:
    """A progress line on stderr (stdout carries the table)."""
    print(f"[e2e {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


async def wait_for_group(env: Env, members: int, limit: float) -> None:
    """Until the fold workers' consumer group is stable with `members` members, so that no
    rebalance (a worker joining late) falls into a timed run."""
    admin = kafka.admin(env.settings)
    await admin.start()
    try:
        deadline = time.monotonic() + limit
        while True:
            env.check_worker()
            described = await admin.describe_consumer_groups([env.settings.app_id])
            # aiokafka answers DescribeGroups responses: groups as (error, id, state, protocol
            # type, protocol, members, ...) tuples.
            groups = [g for response in described for g in response.groups]
            state, count = (groups[0][2], len(groups[0][5])) if groups else ("", 0)
            if state == "Stable" and count == members:
                progress(f"fold group stable with {count} members")
                return
            if time.monotonic() > deadline:
                raise BenchError(f"the fold group was {state or 'absent'} with {count} of "
                                 f"{members} members after {limit:.0f} s")
            await asyncio.sleep(0.5)
    finally:
        await admin.close()
