"""The local processes `om` starts for a configuration: broker, worker and web server.

`om demo` and the integration tests both run the worker and the web server as children in their
own process groups, so a stop (SIGTERM, then SIGKILL) or a crash test (SIGKILL) takes the whole
group.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from omstream.infra.broker import Broker

from .settings import LIVE, Settings

__all__ = ["busy_ports", "local_broker", "port_free", "port_in_use", "start_child", "stop_child"]


def local_broker(settings: Settings) -> Broker:
    """The broker `om broker` and `om demo` manage, under the configuration's data dir."""
    return Broker(settings.data_dir / "broker", port=settings.broker_port,
                  controller_port=settings.controller_port)


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on host:port now.  SO_REUSEADDR, as Kafka's and aiohttp's
    listeners use it, so a closed connection in TIME_WAIT does not count as taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_in_use(port: int, setting: str, option: str | None = None) -> str:
    """The one-line reason and fix for a taken port; `setting` is the [omstream] key."""
    fixes = [f"OM_{setting.upper()}", f"omstream.{setting}", *([option] if option else [])]
    return f"port {port} is in use: stop what holds it or set {' / '.join(fixes)}"


def busy_ports(settings: Settings, *, broker: bool) -> list[str]:
    """The reasons `om demo` cannot listen where configured: the web port, and the broker's
    ports when it would start the broker itself."""
    wanted: list[tuple[str, int, str, str | None]] = [(settings.web_host, settings.web_port, "web_port", "--port")]
    if broker:
        wanted += [("127.0.0.1", settings.broker_port, "broker_port", None),
                   ("127.0.0.1", settings.controller_port, "controller_port", None)]
    return [port_in_use(port, setting, option) for host, port, setting, option in wanted
            if not port_free(host, port)]


def start_child(settings: Settings, command: str, log: Path, *, dies_with_parent: bool = False,
                env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`om <command>` with the same settings (its data dir, namespace, role, ...), output
    appended to `log`; `env` adds variables (`OM_INSTANCE_ID`, `OM_RESULT_KEY`).
    `dies_with_parent`: the child is killed when this process dies, however it dies (Linux), so
    a killed `om replay` leaves no worker folding on its own."""
    args = [sys.executable, "-m", "omstream.cli"]
    if settings.config_file:
        args += ["--config", str(settings.config_file)]
    child_env = {**os.environ, "OM_DATA_DIR": str(settings.data_dir), "OM_NAMESPACE": settings.namespace,
                 "OM_WEB_PORT": str(settings.web_port), "OM_FOLD_MODE": settings.fold_mode,
                 "OM_ONLY_THREADS": settings.only_threads, "OM_ONLY_RESOURCES": settings.only_resources,
                 "OM_ROLE": settings.role, "PYTHONUNBUFFERED": "1",
                 **(env or {})}
    if settings.version != LIVE:
        # Only a version asked for by name: a reader of the live settings serves the version
        # `om switch` chose.
        child_env["OM_VERSION"] = settings.version
    with open(log, "ab") as out:
        return subprocess.Popen([*args, command], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=child_env, start_new_session=True,
                                preexec_fn=_die_with_parent if dies_with_parent else None)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the parent dies (prctl PR_SET_PDEATHSIG)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def stop_child(proc: subprocess.Popen[bytes], *, kill: bool = False, timeout: float = 20.0) -> None:
    """SIGTERM the child's group and wait; SIGKILL when asked to or when it does not stop."""
    if proc.poll() is not None:
        return
    if not kill:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            pass
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
