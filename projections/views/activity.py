"""What each memory is doing now: the one derivation of the dashboard's live figures.

Both dashboard pages show what a memory is doing — the thread list a state per thread, the
thread page a badge per cycle in flight with its elapsed time, and the Buffered card — and they
used to derive it apart (the list from `blocked`, which knows only blocking cycles; the page from
the events it had received, timed from when the page saw them; the card from the last status,
which a step writes before its background cycle ends).  So one page said `idle` while the other
said `buffering`, a 2.5-minute call showed 8 s on a page opened late, and the card said `running,
0 chunks` after the buffer had ended.  Here each figure is derived once, from the feed's kept
events, and both pages show the answer (`dashboard.py`, `GET /dashboard/activity`):

- `held`: the inputs the memory holds behind a cycle (`om-input-held` to `om-input-released`),
  their count, the cycle and since when (append time); the pages show it as a `holding N
  inputs` badge beside the cycles;
- `running`: the cycles started and not yet ended or failed (blocking and background), each
  with its `label` (what the pages print) and `startedMs`, the Kafka append time of its start
  event: when the worker wrote it, on the wall clock.  Event times are the inputs' own clock (a
  recorded conversation's, in the demo), so elapsed time counts from the append time;
- `buffered`: the last status's buffered windows, carried forward by the background cycles'
  ends and the activations since (a status is written once per step), its `status` from
  `running` itself: `running` while a background cycle of that kind is in flight; the projected
  removal, which only a step computes, is null from a chunk's end until the next status.

Each memory's figures are folded incrementally from the events after the last one seen, so a
request costs the events since the previous one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from .history import EventHistory, HistoryEntry

__all__ = ["ActivityIndex", "MemoryActivity", "held_label", "label_of"]

_STARTS = {"data-om-observation-start": "blocking", "data-om-buffering-start": "buffering"}
_ENDS = frozenset({"data-om-observation-end", "data-om-observation-failed", "data-om-buffering-end",
                   "data-om-buffering-failed"})
_LABELS = {("blocking", "observation"): "observing", ("blocking", "reflection"): "reflecting",
           ("buffering", "observation"): "buffering observations",
           ("buffering", "reflection"): "buffering a reflection"}


def label_of(kind: str, operation: str) -> str:
    """What the pages print for a cycle in flight: `observing`, `buffering observations`, ..."""
    return _LABELS[(kind, operation)]


def held_label(count: int) -> str:
    """What the pages print while the memory holds inputs behind a cycle: `holding 2 inputs`."""
    return f"holding {count} input{'s' if count != 1 else ''}"


def _empty_buffered() -> dict[str, Any]:
    return {"observations": {"chunks": 0, "messageTokens": 0, "projectedMessageRemoval": 0, "observationTokens": 0,
                             "status": "idle"},
            "reflection": {"inputObservationTokens": 0, "observationTokens": 0, "status": "idle"}}


@dataclass
class MemoryActivity:
    """One memory's live figures, as of its event `seq`."""

    seq: int = 0
    running: dict[str, dict[str, Any]] = field(default_factory=dict)  # cycle id -> the cycle
    buffered: dict[str, Any] = field(default_factory=_empty_buffered)
    status_seq: int | None = None  # the status the buffered figures start from
    held: dict[str, Any] | None = None  # the inputs held behind a cycle: count, cycleId, sinceMs

    def apply(self, entry: HistoryEntry) -> None:
        self.seq = entry.seq
        event = entry.event
        if event is None:
            return
        kind, data = entry.type, event.data
        if kind in _STARTS:
            self.running[data.cycle_id] = {
                "cycleId": data.cycle_id, "kind": _STARTS[kind], "operationType": data.operation_type,
                "label": label_of(_STARTS[kind], data.operation_type), "startedAt": data.wire()["startedAt"],
                "startedMs": entry.appended_ms, "seq": entry.seq}
        elif kind in _ENDS:
            self.running.pop(data.cycle_id, None)
        elif kind == "om-input-held":
            since = self.held["sinceMs"] if self.held else entry.appended_ms
            self.held = {"count": data.held, "cycleId": data.cycle_id, "sinceMs": since}
        elif kind == "om-input-released":
            self.held = None
        if kind == "data-om-status":
            self.buffered = data.windows.buffered.wire()
            self.status_seq = entry.seq
        elif kind == "data-om-buffering-end":
            self._buffered_end(data)
        elif kind == "data-om-activation":
            self._activated(data)

    def _buffered_end(self, data: Any) -> None:
        if data.operation_type == "observation":
            obs = self.buffered["observations"]
            obs["chunks"] += 1
            obs["messageTokens"] += data.tokens_buffered
            obs["observationTokens"] = data.buffered_tokens
            # What the next activation removes is computed at a step: unknown until the next status.
            obs["projectedMessageRemoval"] = None
        else:
            refl = self.buffered["reflection"]
            refl.update(inputObservationTokens=data.tokens_buffered, observationTokens=data.buffered_tokens,
                        status="complete")

    def _activated(self, data: Any) -> None:
        if data.operation_type == "observation":  # one event per chunk
            obs = self.buffered["observations"]
            obs["chunks"] = max(obs["chunks"] - data.chunks_activated, 0)
            obs["messageTokens"] = max(obs["messageTokens"] - data.tokens_activated, 0)
            if not obs["chunks"]:
                obs.update(messageTokens=0, projectedMessageRemoval=0, observationTokens=0)
        else:
            self.buffered["reflection"] = _empty_buffered()["reflection"]

    def answer(self) -> dict[str, Any]:
        """The figures as the pages read them."""
        running = sorted(self.running.values(), key=lambda c: c["seq"])
        buffered = copy.deepcopy(self.buffered)
        in_flight = {(c["kind"], c["operationType"]) for c in running}
        obs, refl = buffered["observations"], buffered["reflection"]
        obs["status"] = ("running" if ("buffering", "observation") in in_flight
                         else "complete" if obs["chunks"] else "idle")
        refl["status"] = ("running" if ("buffering", "reflection") in in_flight
                          else "complete" if refl["status"] != "idle" and refl["observationTokens"] else "idle")
        labels = [c["label"] for c in running]
        if self.held:
            labels.append(held_label(self.held["count"]))
        return {"seq": self.seq, "labels": labels, "running": running, "held": self.held,
                "buffered": buffered, "statusSeq": self.status_seq}


class ActivityIndex:
    """Every memory's `MemoryActivity`, brought up to date from a history when asked."""

    def __init__(self, history: EventHistory) -> None:
        self.history = history
        self._memories: dict[str, MemoryActivity] = {}

    def of(self, memory_key: str) -> MemoryActivity:
        activity = self._memories.setdefault(memory_key, MemoryActivity())
        if self.history.last_seq(memory_key) < activity.seq:  # deleted, and begun anew from seq 1
            activity = self._memories[memory_key] = MemoryActivity()
        for entry in self.history.since(memory_key, activity.seq):
            activity.apply(entry)
        return activity
