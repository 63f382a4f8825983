"""The records of the version registry `<ns>.versions`, as they are on the wire.

The topic is compacted and has one partition; its key says what a record is:

- `version:<name>`: a version's configuration, its digest and how it folds (`follow` or
  `settled`), a JSON object `{"name", "digest", "foldMode", "config", "threads"}`; a tombstone
  (no value) drops the version;
- `default`: the version readers serve when they are not told one, `{"version": <name>}`; a
  tombstone means the live version;
- `result-key`: the fingerprint of the key the namespace's model results are signed with,
  `{"fingerprint": <hex>}` (`omstream.worker.key_agreement`; shared by every version, since
  they share the input log the results travel on).

The bytes are orjson's of those objects, keys in that order: what `om replay` and workers wrote
before these types existed reads back, and what they write reads in an older `om`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

__all__ = ["DEFAULT_KEY", "DefaultVersion", "ResultKeyFingerprint", "VersionInfo", "version_key", "version_name"]

DEFAULT_KEY = b"default"
RESULT_KEY_KEY = b"result-key"
_VERSION_PREFIX = b"version:"


def version_key(name: str) -> bytes:
    """The key of version `name`'s record."""
    return _VERSION_PREFIX + name.encode()


def version_name(key: bytes) -> str | None:
    """The version a record key names; None for a key of another kind (`default`)."""
    return key.removeprefix(_VERSION_PREFIX).decode() if key.startswith(_VERSION_PREFIX) else None


@dataclass(frozen=True)
class VersionInfo:
    """A version as registered: its name, configuration and how it folds."""

    name: str
    digest: str
    fold_mode: str
    config: dict[str, Any]
    threads: tuple[str, ...] = ()  # the threads it folds; empty: all
    resources: tuple[str, ...] = ()  # in resource scope, the resources it folds; empty: all

    @property
    def key(self) -> bytes:
        return version_key(self.name)

    def to_bytes(self) -> bytes:
        record = {"name": self.name, "digest": self.digest, "foldMode": self.fold_mode,
                  "config": self.config, "threads": list(self.threads)}
        if self.resources:  # a version of every resource keeps the bytes it always had
            record["resources"] = list(self.resources)
        return orjson.dumps(record)

    @classmethod
    def from_bytes(cls, name: str, value: bytes) -> VersionInfo:
        """The record of version `name` (the name of the key, which compaction goes by); a record
        written before versions named their threads (or resources) folds every one."""
        data = orjson.loads(value)
        return cls(name, data["digest"], data["foldMode"], data["config"], tuple(data.get("threads", ())),
                   tuple(data.get("resources", ())))


@dataclass(frozen=True)
class DefaultVersion:
    """The version readers serve by default (`om switch`)."""

    version: str

    key: ClassVar[bytes] = DEFAULT_KEY

    def to_bytes(self) -> bytes:
        return orjson.dumps({"version": self.version})

    @classmethod
    def from_bytes(cls, value: bytes) -> DefaultVersion:
        return cls(orjson.loads(value)["version"])


@dataclass(frozen=True)
class ResultKeyFingerprint:
    """Which key signs the namespace's model results, as its fingerprint (never the key)."""

    fingerprint: str

    key: ClassVar[bytes] = RESULT_KEY_KEY

    def to_bytes(self) -> bytes:
        return orjson.dumps({"fingerprint": self.fingerprint})

    @classmethod
    def from_bytes(cls, value: bytes) -> ResultKeyFingerprint:
        return cls(orjson.loads(value)["fingerprint"])
