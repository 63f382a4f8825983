"""`ensure_jars` (omstream.infra.broker) runs Maven once when several processes start a broker
on a fresh checkout at once (the test suite's two processes do): the others wait for it and
find the jars.  Maven is replaced by a stand-in that takes its time and counts its runs."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from omstream.infra import broker


def test_processes_starting_at_once_resolve_the_jars_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(broker, "POM", tmp_path / "kafka" / "pom.xml")
    runs: list[list[str]] = []

    def maven(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        runs.append(cmd)
        time.sleep(0.3)  # copying: a second run meanwhile replaced the first one's files
        broker.jars_dir().mkdir(parents=True, exist_ok=True)
        (broker.jars_dir() / broker.BROKER_JAR).write_bytes(b"jar")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(broker.subprocess, "run", maven)
    found: list[Path] = []
    starts = [threading.Thread(target=lambda: found.append(broker.ensure_jars())) for _ in range(3)]
    for t in starts:
        t.start()
    for t in starts:
        t.join()
    assert len(runs) == 1 and found == [broker.jars_dir()] * 3
