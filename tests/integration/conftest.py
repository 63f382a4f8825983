"""The real broker for the integration tests: started once per run, never skipped.

The broker is `infra.broker.Broker` (Kafka 4.0.2 from Maven Central) on free ports in a fresh
temporary directory.  If it does not come up, the run fails with the broker's own log.  Each
test gets its own namespace (topics, consumer group, state) and its own worker processes.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from omstream.infra.broker import Broker, BrokerError, free_port
from omstream.processes import start_child, stop_child
from omstream.settings import load_settings
from omstream.topics import ensure_topics
from tests.integration.options import om_options


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("kafka"), port=free_port(), controller_port=free_port())
    b.start()
    try:
        asyncio.run(b.wait_ready(timeout=120))
    except BrokerError as exc:
        b.stop()
        pytest.exit(f"the Kafka broker did not start: {exc}", returncode=3)
    yield b
    b.stop()


class Worker:
    """`om worker` as a child process, in its own process group (so SIGKILL takes it all)."""

    def __init__(self, settings, log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.settings = settings
        self.proc = start_child(settings, "worker", log, env=env)

    def kill(self) -> None:
        stop_child(self.proc, kill=True)

    def stop(self) -> None:
        stop_child(self.proc)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


CONFIG = """
[omstream]
namespace = "{namespace}"
bootstrap = "{bootstrap}"
partitions = {partitions}
data_dir = "{data}"
retry_base_ms = 50
model_retries = 2
model_concurrency = 2
"""



class Env:
    """One namespace on the session broker: its settings and its worker processes."""

    def __init__(self, broker: Broker, root: Path, options: str, partitions: int = 2) -> None:
        root.mkdir(parents=True)
        self.root = root
        self.config = root / "om.toml"
        self.config.write_text(CONFIG.format(
            namespace=f"t{uuid.uuid4().hex[:10]}", bootstrap=broker.bootstrap,
            data=root / "data", partitions=partitions) + options)
        self.settings = load_settings(self.config)
        asyncio.run(ensure_topics(self.settings))
        self.workers: list[Worker] = []

    def start_worker(self, role: str = "all", data_dir: Path | None = None,
                     env: dict[str, str] | None = None) -> Worker:
        """`om worker --role ROLE` (as `OM_ROLE`), with the namespace's data directory unless
        given its own; `env` adds variables (`OM_INSTANCE_ID`, `OM_RESULT_KEY`)."""
        settings = replace(self.settings, role=role, data_dir=data_dir or self.settings.data_dir)
        w = Worker(settings, self.root / f"worker{len(self.workers)}.log", env)
        self.workers.append(w)
        return w

    def logs(self) -> str:
        return "\n".join(f"--- {w.log.name}\n{w.tail()}" for w in self.workers)


@pytest.fixture
def new_env(broker, tmp_path, request):
    """A factory of fresh namespaces; workers are stopped (and their logs shown on failure)."""
    envs: list[Env] = []

    def make(message_tokens: int = 1000, options: str | None = None, partitions: int = 2) -> Env:
        """`options`: the TOML of `om_options(...)` (tests/integration/options.py), replacing the
        default: the scripted Observer, blocking at `message_tokens`."""
        options = options or om_options(observation={"messageTokens": message_tokens, "bufferTokens": False})
        env = Env(broker, tmp_path / f"env{len(envs)}", options, partitions)
        envs.append(env)
        return env

    yield make
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for env in envs:
        for w in env.workers:
            w.stop()
        if failed:
            print(env.logs())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
