"""What each version's workers report: their running figures, in `stats.json`.

Each worker keeps its running figures (records folded, memories, observation tokens,
generations, model calls, cache hits, cost) in `stats.json` beside its tables, so `om replay`
and `om versions` can show them without reading a version's whole output.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..settings import Settings

__all__ = ["StatsSummary", "WorkerStats", "stats_path"]


@dataclass(frozen=True)
class StatsSummary:
    """A version's figures as `om replay` and `om versions` show them."""

    model_calls: int
    cache_hits: int
    cost_usd: float
    memories: int
    observation_tokens: int
    generations: int

    def to_json(self) -> dict[str, Any]:
        return {"modelCalls": self.model_calls, "cacheHits": self.cache_hits, "costUsd": self.cost_usd,
                "memories": self.memories, "observationTokens": self.observation_tokens,
                "generations": self.generations}


def stats_path(settings: Settings) -> Path:
    """A worker's figures, beside its tables (model agents apart keep theirs in their own group's
    folder: `Settings.worker_group`)."""
    return settings.data_dir / "worker" / settings.worker_group / "stats.json"


@dataclass
class WorkerStats:
    """A version's running figures on this machine; they survive restarts (a resumed replay
    adds to them)."""

    model_calls: int = 0
    cache_hits: int = 0
    cost_usd: float = 0.0
    memories: dict[str, list[int]] = field(default_factory=dict)  # key -> [observation tokens, generation]

    @classmethod
    def load(cls, path: Path) -> WorkerStats:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls()
        return cls(data.get("modelCalls", 0), data.get("cacheHits", 0), data.get("costUsd", 0.0),
                   data.get("memories", {}))

    def summary(self) -> StatsSummary:
        return StatsSummary(self.model_calls, self.cache_hits, round(self.cost_usd, 6), len(self.memories),
                            sum(m[0] for m in self.memories.values()),
                            sum(m[1] for m in self.memories.values()))

    def save(self, path: Path) -> None:
        """Written whole and renamed into place: a reader never sees half a file."""
        data = {"modelCalls": self.model_calls, "cacheHits": self.cache_hits,
                "costUsd": self.cost_usd, "memories": self.memories}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
