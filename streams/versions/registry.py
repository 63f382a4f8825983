"""The version registry `<ns>.versions`: which versions a namespace has, and the default one.

A version's worker registers it when it starts, and so does `om replay`; `om switch` sets the
default and `om drop` forgets a version.  The records are `omstream.versions.records`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import kafka
from ..settings import LIVE, Settings
from ..topics import Topics, read_until_end
from .records import DefaultVersion, ResultKeyFingerprint, VersionInfo, version_key, version_name

__all__ = ["Registry", "forget", "read_registry", "register", "set_default", "set_result_key", "version_info"]


@dataclass
class Registry:
    versions: dict[str, VersionInfo] = field(default_factory=dict)
    default: str = LIVE
    result_key: str | None = None  # the fingerprint of the namespace's result key, once a worker set it

    def apply(self, key: bytes, value: bytes | None) -> None:
        """One record of the topic, read in order (a later record of a key replaces it)."""
        if key == DefaultVersion.key:
            self.default = DefaultVersion.from_bytes(value).version if value else LIVE
            return
        if key == ResultKeyFingerprint.key:
            self.result_key = ResultKeyFingerprint.from_bytes(value).fingerprint if value else None
            return
        name = version_name(key)
        if name is None:
            return
        if value is None:
            self.versions.pop(name, None)
        else:
            self.versions[name] = VersionInfo.from_bytes(name, value)


def version_info(settings: Settings) -> VersionInfo:
    from ..engine.step import config_digest

    return VersionInfo(settings.version, config_digest(settings.om), settings.fold_mode,
                       settings.om.model_dump(mode="json", by_alias=True, exclude_defaults=True),
                       tuple(sorted(settings.thread_filter)),
                       tuple(sorted(r.strip() for r in settings.only_resources.split(",") if r.strip())))


async def read_registry(settings: Settings) -> Registry:
    """The registry as it stands (the topic read to its end)."""
    registry = Registry()
    async for record in read_until_end(settings.bootstrap, Topics.of(settings).versions, [0]):
        registry.apply(record.key or b"", record.value)
    return registry


async def _send(settings: Settings, key: bytes, value: bytes | None) -> None:
    producer = kafka.acked_producer(settings)
    await producer.start()
    try:
        await producer.send_and_wait(Topics.of(settings).versions, value, key=key, partition=0)
    finally:
        await producer.stop()


async def register(settings: Settings, info: VersionInfo) -> None:
    await _send(settings, info.key, info.to_bytes())


async def set_default(settings: Settings, name: str) -> None:
    await _send(settings, DefaultVersion.key, DefaultVersion(name).to_bytes())


async def set_result_key(settings: Settings, fingerprint: str) -> None:
    await _send(settings, ResultKeyFingerprint.key, ResultKeyFingerprint(fingerprint).to_bytes())


async def forget(settings: Settings, name: str) -> None:
    await _send(settings, version_key(name), None)
