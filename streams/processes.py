"""The local processes `om` starts for a configuration: broker, worker and web server.

`om demo` and the integration tests both run the worker and the web server as children in their
own process groups, so a stop (SIGTERM, then SIGKILL) or a crash test (SIGKILL) takes the whole
group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from omstream.infra.broker import Broker

from .settings import Settings

__all__ = ["local_broker", "start_child", "stop_child"]


def local_broker(settings: Settings) -> Broker:
    """The broker `om broker` and `om demo` manage, under the configuration's data dir."""
    return Broker(settings.data_dir / "broker", port=settings.broker_port,
                  controller_port=settings.controller_port)


def start_child(settings: Settings, command: str, log: Path) -> subprocess.Popen:
    """`om <command>` with the same settings, output appended to `log`."""
    args = [sys.executable, "-m", "omstream.cli"]
    if settings.config_file:
        args += ["--config", str(settings.config_file)]
    env = {**os.environ, "OM_DATA_DIR": str(settings.data_dir), "OM_NAMESPACE": settings.namespace,
           "PYTHONUNBUFFERED": "1"}
    with open(log, "ab") as out:
        return subprocess.Popen([*args, command], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def stop_child(proc: subprocess.Popen, *, kill: bool = False, timeout: float = 20.0) -> None:
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
