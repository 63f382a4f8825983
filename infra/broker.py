"""A local single-node Apache Kafka broker (KRaft), resolved from Maven Central.

The broker is the real thing: `kafka.Kafka` from `org.apache.kafka:kafka_2.13:4.0.2`, its runtime
classpath copied by Maven (`infra/kafka/pom.xml`), run by the JVM on the machine, bound to
127.0.0.1.  `om broker start|stop|status` and the integration-test harness both use this module;
its readiness probe builds its clients with `omstream.kafka`, as every other client of omstream.

Lifecycle of a data directory::

    <data_dir>/server.properties   written on every start (ports may change)
    <data_dir>/logs/               Kafka's log.dirs, formatted once with a fresh cluster id
    <data_dir>/broker.pid          pid of the JVM (its own process group)
    <data_dir>/broker.log          the JVM's stdout and stderr
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from omstream import kafka
from omstream.schemas.errors import OmError

from .file_lock import exclusive

__all__ = [
    "KAFKA_VERSION",
    "Broker",
    "BrokerError",
    "ensure_jars",
    "free_port",
    "jars_dir",
    "new_cluster_id",
]

KAFKA_VERSION = "4.0.2"
POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
BROKER_JAR = f"kafka_2.13-{KAFKA_VERSION}.jar"


class BrokerError(OmError, RuntimeError):
    """The local broker could not be resolved, started or reached; the message says which."""


def jars_dir() -> Path:
    """Where Maven copies the broker's runtime classpath."""
    return POM.parent / "target" / "libs"


def ensure_jars(*, quiet: bool = True) -> Path:
    """Resolve the broker jars through Maven unless they are already there.

    One process at a time (a lock file beside them): the test suite's two processes each start a
    broker, and on a fresh checkout both ran Maven into the same folder, one failing as the
    other's copy replaced its files (or starting the JVM on a classpath still being copied)."""
    libs = jars_dir()
    with exclusive(libs.parent / "resolve.lock"):
        if (libs / BROKER_JAR).exists():
            return libs
        cmd = ["mvn", "-B", "-f", str(POM), "package"]
        if quiet:
            cmd.insert(1, "-q")
        proc = subprocess.run(cmd, capture_output=quiet, text=True)
        if proc.returncode != 0 or not (libs / BROKER_JAR).exists():
            tail = (proc.stdout or "")[-2000:] + (proc.stderr or "")[-2000:]
            raise BrokerError(f"Maven could not resolve Kafka {KAFKA_VERSION} jars:\n{tail}")
        return libs


def new_cluster_id() -> str:
    """A random cluster id as Kafka's `Uuid.randomUuid().toString()` makes one: 16 random bytes
    in url-safe base64 without padding, drawn again while the text would begin with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _properties(data_dir: Path, port: int, controller_port: int) -> str:
    # Everything replicated once: a single node must be able to host the internal topics.
    single = {
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
    }
    props = {
        "process.roles": "broker,controller",
        "node.id": 1,
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir / "logs"),
        # Topics are created explicitly with their partition counts (see streams.topics);
        # auto-creation would give a topic the broker default and break co-partitioning.
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": 0,
        **single,
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


@dataclass
class Broker:
    """One broker process bound to a data directory."""

    data_dir: Path
    port: int = 9092
    controller_port: int = 9093
    heap: str = "-Xms512m -Xmx1g"

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).resolve()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    def pid(self) -> int | None:
        """The running broker's pid, or None (a stale pid file is removed)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            self.pid_file.unlink(missing_ok=True)
            return None
        return pid

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no broker log)"

    def _java(self, libs: Path, main: str, *args: str) -> list[str]:
        return ["java", *self.heap.split(), "-cp", f"{libs}/*", main, *args]

    @property
    def properties_file(self) -> Path:
        return self.data_dir / "server.properties"

    def formatted(self) -> bool:
        return (self.data_dir / "logs" / "meta.properties").exists()

    def format(self, cluster_id: str | None = None) -> str:
        """Write server.properties and format log.dirs (KRaft); returns the cluster id."""
        libs = ensure_jars()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(_properties(self.data_dir, self.port, self.controller_port))
        cluster_id = cluster_id or new_cluster_id()
        # `--cluster-id=<id>` in one argument: an id may begin with '-' (Kafka's own never
        # does, but one given here might), and as a separate argument it would read as an option.
        fmt = subprocess.run(
            self._java(libs, "kafka.tools.StorageTool", "format", "--standalone",
                       f"--cluster-id={cluster_id}", "--config", str(self.properties_file)),
            capture_output=True, text=True,
        )
        if fmt.returncode != 0:
            raise BrokerError(f"kafka storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
        return cluster_id

    def start(self) -> None:
        """Format the data dir if it is new, then start the JVM in its own process group."""
        if self.pid() is not None:
            raise BrokerError(f"a broker is already running from {self.data_dir} (pid {self.pid()})")
        libs = ensure_jars()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Written on every start: the ports may have changed since the format.
        self.properties_file.write_text(_properties(self.data_dir, self.port, self.controller_port))
        if not self.formatted():
            self.format()
        props = self.properties_file
        log = open(self.log_file, "ab")
        proc = subprocess.Popen(
            self._java(libs, "kafka.Kafka", str(props)),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self.pid_file.write_text(str(proc.pid))

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM (controlled shutdown), then SIGKILL of the process group. True if it ran."""
        pid = self.pid()
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _alive(pid):
                break
            time.sleep(0.2)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True

    async def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait until the broker accepts, answers the admin API and serves a consumer group."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.pid() is None:
                raise BrokerError(f"the broker exited during start-up:\n{self.log_tail()}")
            try:
                await asyncio.wait_for(_probe(self.bootstrap), timeout=max(1.0, deadline - time.monotonic()))
                return
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last_error = exc
                await asyncio.sleep(0.5)
        raise BrokerError(f"broker not ready after {timeout:.0f}s ({last_error!r}):\n{self.log_tail()}")


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _probe(bootstrap: str) -> None:
    """Admin round trip, then produce and consume through a committed consumer group."""
    from aiokafka.admin import NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=1.0):
        pass
    topic = "__omstream_readiness"
    admin = kafka.admin(bootstrap, request_timeout_ms=kafka.PROBE_TIMEOUT_MS)
    await admin.start()
    try:
        await admin.describe_cluster()
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = kafka.producer(bootstrap)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, b"ping")
    finally:
        await producer.stop()
    consumer = kafka.group_reader(bootstrap, "__omstream_readiness", topic, auto_offset_reset="earliest")
    await consumer.start()
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=1000)
            records = [r for rs in batch.values() for r in rs]
            if any(r.offset >= meta.offset for r in records):
                await consumer.commit()
                return
    finally:
        await consumer.stop()
