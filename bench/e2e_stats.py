"""Pure helpers of the end-to-end benchmark (`bench.e2e`): percentiles, latencies, live state sizes
read back from changelogs, a process group's RSS, and matching a thread's events to its inputs
in fold order.  No broker here (tested in tests/unit/bench/test_bench_smoke.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between the closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def live_sizes(records: Iterable[tuple[bytes | None, bytes | None]],
               sizes: dict[bytes, int] | None = None) -> dict[bytes, int]:
    """len(key) + len(value) of each key's latest value, in changelog order; a None value is a
    tombstone (the key is deleted).  Updates and returns `sizes` when given (incremental reads)."""
    sizes = {} if sizes is None else sizes
    for key, value in records:
        key = key or b""
        if value is None:
            sizes.pop(key, None)
        else:
            sizes[key] = len(key) + len(value)
    return sizes


def belongs_to(key: bytes, memory: bytes) -> bool:
    """Whether a table key stores (part of) a memory: the bare memory key (the one-value layout)
    or the memory key, a NUL byte, and a suffix (the split layout)."""
    return key == memory or key.startswith(memory + b"\x00")


def memory_state_bytes(sizes: Mapping[bytes, int], memory: bytes) -> tuple[int, int]:
    """(bytes, keys) of one memory's live state, from `live_sizes`."""
    mine = [size for key, size in sizes.items() if belongs_to(key, memory)]
    return sum(mine), len(mine)


def worker_rss_kb(pgid: int, proc: Path = Path("/proc")) -> dict[str, int]:
    """VmRSS and VmHWM (peak), in kB, summed over the python processes of a process group (the
    worker child is its group's leader; Faust runs in that one process)."""
    rss = peak = count = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:  # gone meanwhile
            continue
        # After the last ')' (the command name may hold spaces): state, ppid, pgrp, ...
        if int(stat.rsplit(")", 1)[1].split()[2]) != pgid or "python" not in stat.split(")")[0]:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss += int(fields.get("VmRSS", "0 kB").split()[0])
        peak += int(fields.get("VmHWM", "0 kB").split()[0])
        count += 1
    return {"rss_kb": rss, "peak_kb": peak, "processes": count}


@dataclass(frozen=True)
class Latency:
    """A latency distribution, in milliseconds."""

    n: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        ms = [s * 1000 for s in seconds]
        return cls(len(ms), percentile(ms, 50), percentile(ms, 99), max(ms, default=None))


#: One thread's events as the bench saw them, in the order they were folded (one partition holds
#: a memory, so consume order is fold order): (kind, detail, consume time); kind is "accepted"
#: (detail: the message id), "status" (detail: its stepNumber, None for a per-message check) or
#: "activation" (detail: None).
Seen = tuple[str, Any, float]


def message_status_times(seen: Sequence[Seen]) -> dict[str, float]:
    """When each message's `data-om-status` was consumed: the thread's first status after the
    message's `om-message-accepted`.

    Not by `inputOffset`: a record held while a blocking cycle runs is folded when the cycle's
    model result is, and its events carry the result's offset.  In fold order, though, the
    message's check (and so its status) always follows its acceptance, also when a cycle in
    between held it; a message folded under per-step checks has no status of its own (it then
    takes the next step's, which is when the agent sees it)."""
    out: dict[str, float] = {}
    waiting: list[str] = []
    for kind, detail, at in seen:
        if kind == "accepted":
            waiting.append(detail)
        elif kind == "status":
            out.update((message_id, at) for message_id in waiting)
            waiting = []
    return out


def step_times(seen: Sequence[Seen]) -> list[tuple[float, float | None]]:
    """For each step of a thread, in order: when its `data-om-status` was consumed, and when the
    first `data-om-activation` its check caused was (None: it activated nothing).

    A step's check emits exactly one status carrying its step number, at its end (later, when a
    cycle held the step), and any activation of that check comes before it; statuses without a
    step number (per-message checks, model results) belong to no step."""
    out: list[tuple[float, float | None]] = []
    activation: float | None = None
    for kind, detail, at in seen:
        if kind == "activation" and activation is None:
            activation = at
        elif kind == "status" and detail is not None:
            out.append((at, activation))
            activation = None
        elif kind == "status":
            activation = None  # it belonged to that per-message check or model result
    return out
