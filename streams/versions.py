"""Memory versions: the registry `<ns>.versions`, and what each version's workers report.

A version is a name and a configuration (omstream.topics has how its topics are named).  The
registry is a compacted topic of one partition with two kinds of record:

- `version:<name>`: the version's configuration, its digest and how it folds (`follow` or
  `settled`), written by its worker when it starts and by `om replay`; a tombstone drops it;
- `default`: the version readers serve when they are not told one (`om switch`).

Each worker also keeps its running figures (records folded, memories, observation tokens,
generations, model calls, cache hits, cost) in `stats.json` beside its tables, so `om replay`
and `om versions` can show them without reading a version's whole output.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .settings import LIVE, Settings
from .topics import Topics, read_until_end

__all__ = ["Registry", "VersionInfo", "WorkerStats", "forget", "read_registry", "register",
           "set_default", "stats_path", "version_info"]

DEFAULT_KEY = b"default"


@dataclass(frozen=True)
class VersionInfo:
    name: str
    digest: str
    fold_mode: str
    config: dict[str, Any]
    threads: tuple[str, ...] = ()  # the threads it folds; empty: all


@dataclass
class Registry:
    versions: dict[str, VersionInfo] = field(default_factory=dict)
    default: str = LIVE


def version_info(settings: Settings) -> VersionInfo:
    from .engine.step import config_digest

    return VersionInfo(settings.version, config_digest(settings.om), settings.fold_mode,
                       settings.om.model_dump(mode="json", by_alias=True, exclude_defaults=True),
                       tuple(sorted(settings.thread_filter)))


async def read_registry(settings: Settings) -> Registry:
    """The registry as it stands (the topic read to its end)."""
    registry = Registry()
    async for record in read_until_end(settings.bootstrap, Topics.of(settings).versions, [0]):
        _apply(registry, record.key or b"", record.value)
    return registry


def _apply(registry: Registry, key: bytes, value: bytes | None) -> None:
    if key == DEFAULT_KEY:
        registry.default = orjson.loads(value)["version"] if value else LIVE
    elif key.startswith(b"version:"):
        name = key.decode().removeprefix("version:")
        if value is None:
            registry.versions.pop(name, None)
        else:
            data = orjson.loads(value)
            registry.versions[name] = VersionInfo(name, data["digest"], data["foldMode"], data["config"],
                                                  tuple(data.get("threads", ())))


async def _send(settings: Settings, key: bytes, value: bytes | None) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(Topics.of(settings).versions, value, key=key, partition=0)
    finally:
        await producer.stop()


async def register(settings: Settings, info: VersionInfo) -> None:
    value = orjson.dumps({"name": info.name, "digest": info.digest, "foldMode": info.fold_mode,
                          "config": info.config, "threads": list(info.threads)})
    await _send(settings, f"version:{info.name}".encode(), value)


async def set_default(settings: Settings, name: str) -> None:
    await _send(settings, DEFAULT_KEY, orjson.dumps({"version": name}))


async def forget(settings: Settings, name: str) -> None:
    await _send(settings, f"version:{name}".encode(), None)


def stats_path(settings: Settings) -> Path:
    return settings.data_dir / "worker" / settings.app_id / "stats.json"


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

    def summary(self) -> dict[str, Any]:
        return {"modelCalls": self.model_calls, "cacheHits": self.cache_hits,
                "costUsd": round(self.cost_usd, 6), "memories": len(self.memories),
                "observationTokens": sum(m[0] for m in self.memories.values()),
                "generations": sum(m[1] for m in self.memories.values())}

    def save(self, path: Path) -> None:
        """Written whole and renamed into place: a reader never sees half a file."""
        data = {"modelCalls": self.model_calls, "cacheHits": self.cache_hits,
                "costUsd": self.cost_usd, "memories": self.memories}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
