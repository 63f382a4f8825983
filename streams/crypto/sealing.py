"""Records in, records out: the one place the pipeline seals and opens content.

Every layer that writes or reads content (`OmClient`, the fold agent, the model agents, the
state store, the cache, the read side) asks a `Sealer`, which works on a record's JSON bytes as
they travel, so no codec, schema or topic changes shape:

- `seal(value, owner)` / `seal_with(value, key)`: the content fields of the record
  (`omstream.crypto.fields`) sealed under the owner's data key, and the marker `"omSealed": 1`
  added at the top, so readers open only what was sealed (a plain producer's text that looks like
  an envelope is never taken for one).  `context` (the output's identity) makes the bytes
  deterministic, for what the fold writes.
- `open(value, owner)`: the record as it was, or unchanged when it carries no marker.  Raises
  `Shredded` (the owner was deleted: pass the record over) or `Tampered`; call `prepare` first
  with the batch's values so every key is loaded (`open` itself never waits).
- `seal_blob` / `open_blob`: an opaque value (a state record, a cache entry) sealed whole.

The *owner* is whose key seals a record: the memory key, except in resource scope where a
message is sealed under its thread's key, so deleting one thread shreds its messages only
(`content_owner`).

A `Sealer` without a ring (no namespace key configured) is `PLAIN`: every method returns its
input, so a deployment without encryption pays nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from .envelope import DataKey, is_sealed, open_value, parse, seal_value
from .fields import decrypt_fields, encrypt_fields, sealed_key_ids

if TYPE_CHECKING:
    from omstream.settings import Settings

    from .keyring import KeyRing

__all__ = ["MARK", "PLAIN", "Sealer", "content_owner", "is_marked", "raw_owner", "record_owner", "sealer_of"]

#: The top-level field that marks a sealed record.
MARK = "omSealed"
_MARK_BYTES = b'"omSealed":1'
_BLOB_PATH = "blob"


def content_owner(memory_key: str, thread_id: str | None, *, is_message: bool) -> str:
    """Whose data key seals a record of `memory_key`: the memory's, but a message of a resource
    memory is its thread's (`thread:<memory key>/<thread id>`), so a thread deletion inside a
    resource shreds that thread's messages and nothing else."""
    if is_message and memory_key.startswith("resource:") and thread_id:
        return f"thread:{memory_key}/{thread_id}"
    return memory_key


def record_owner(data: dict[str, Any], key: str | None = None) -> str:
    """Whose data key seals the record `data` (its JSON), the record key being `key` (an event
    names its memory itself): the memory's, but a message's (on `<ns>.log`, or inside
    `om-message-accepted`) is its thread's in resource scope.  The type and the thread id stay
    clear in a sealed record, so the owner is known without any key."""
    memory = key or str(data.get("memoryKey") or "")
    kind = data.get("type", "message")
    thread = data.get("threadId")
    if kind == "om-message-accepted":
        body = data.get("data")
        message = body.get("message") if isinstance(body, dict) else None
        thread = (message.get("threadId") if isinstance(message, dict) else None) or thread
    elif kind != "message":
        return memory
    return content_owner(memory, thread if isinstance(thread, str) else None, is_message=True)


def raw_owner(memory_key: str, value: bytes) -> str | None:
    """`record_owner` of a record's bytes; None when they are not a JSON object."""
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return record_owner(data, memory_key) if isinstance(data, dict) else None


def is_marked(value: bytes | None) -> bool:
    """Whether the record's bytes carry the sealed marker (cheap: no parse)."""
    return bool(value) and _MARK_BYTES in value  # type: ignore[operator]


class Sealer:
    """Seals and opens records with the data keys of a `KeyRing`; without one, passes through."""

    def __init__(self, ring: KeyRing | None) -> None:
        self.ring = ring
        self._users = 0
        self._starting = asyncio.Lock()

    @property
    def enabled(self) -> bool:
        return self.ring is not None

    async def start(self) -> None:
        """One sealer serves every part of a process (each reads the whole `<ns>.keys` and
        follows it otherwise): its ring starts with the first `start` and stops with the last
        `stop`, and a `start` returns only once the ring has read the topic."""
        if self.ring is None:
            return
        async with self._starting:
            if self._users == 0:
                await self.ring.start()
            self._users += 1

    async def stop(self) -> None:
        if self.ring is None or self._users == 0:
            return
        self._users -= 1
        if self._users == 0:
            await self.ring.stop()

    # --- keys -----------------------------------------------------------------------------------
    async def key_of(self, owner: str) -> DataKey:
        """The owner's current data key, created on first use."""
        assert self.ring is not None
        return await self.ring.data_key(owner)

    async def prepare(self, values: Iterable[bytes | None]) -> None:
        """Load every key the sealed records among `values` name, so `open` needs no wait.  A
        record whose key was shredded is not an error here: `open` reports it."""
        if self.ring is None:
            return
        ids: set[str] = set()
        for value in values:
            if is_marked(value):
                try:
                    data = orjson.loads(value)  # type: ignore[arg-type]
                except orjson.JSONDecodeError:
                    continue  # the decoder dead-letters it with its reason
                if isinstance(data, dict):
                    ids |= _ids_in(data)
        for key_id in ids:
            await self.ring.prime(key_id)

    async def shred(self, owner: str, through: int | None = None, at: tuple[int, int] | None = None) -> None:
        """Shred the owner's keys up to epoch `through` (default: its current epoch) for the
        deletion record at `at` (`KeyRing.shred`)."""
        if self.ring is not None:
            await self.ring.shred(owner, through, at)

    def epoch(self, owner: str) -> int:
        """The owner's current key epoch, as far as the ring has read."""
        return self.ring.book.epoch(owner) if self.ring is not None else 0

    def shredded_by(self, owner: str, at: tuple[int, int]) -> bool:
        """Whether the deletion record at `at` has shredded the owner already (`KeyBook.shredded_by`)."""
        return self.ring is not None and self.ring.book.shredded_by(owner, at)

    # --- records --------------------------------------------------------------------------------
    async def seal(self, value: bytes, owner: str, *, context: bytes | None = None) -> bytes:
        if self.ring is None:
            return value
        return self.seal_with(value, await self.key_of(owner), context=context)

    def seal_with(self, value: bytes, key: DataKey | None, *, context: bytes | None = None) -> bytes:
        """`value` with its content sealed under `key` (None: unchanged)."""
        if key is None:
            return value
        data = orjson.loads(value)
        if not isinstance(data, dict) or data.get(MARK):
            return value
        sealed = encrypt_fields(data, key, context=context)
        if sealed == data:
            return value  # no content: nothing to hide, nothing to mark
        sealed[MARK] = 1
        return orjson.dumps(sealed)

    def open(self, value: bytes | None, owner: str) -> bytes | None:
        """The record with its content opened; unchanged when not marked."""
        if self.ring is None or not is_marked(value):
            return value
        data = orjson.loads(value)  # type: ignore[arg-type]
        if not isinstance(data, dict) or not data.get(MARK):
            return value
        opened = decrypt_fields(data, owner, self.ring)
        del opened[MARK]
        return orjson.dumps(opened)

    def seal_blob(self, raw: bytes, key: DataKey | None, *, context: bytes | None = None) -> bytes:
        """An opaque value sealed whole (the JSON string of one envelope); None key: unchanged."""
        if key is None:
            return raw
        return orjson.dumps(seal_value(raw.decode("latin-1"), key, _BLOB_PATH, context=context))

    def open_blob(self, raw: bytes, owner: str) -> bytes:
        """The value `seal_blob` sealed, or `raw` itself when it is not sealed."""
        if self.ring is None or not raw.startswith(b'"om1'):
            return raw
        text = orjson.loads(raw)
        if not is_sealed(text):
            return raw
        env = parse(text)
        plain: str = open_value(env, self.ring.key(env.key_id), owner, _BLOB_PATH)
        return plain.encode("latin-1")

    def blob_key_ids(self, raw: bytes) -> set[str]:
        if not raw.startswith(b'"om1'):
            return set()
        text = orjson.loads(raw)
        return {parse(text).key_id} if is_sealed(text) else set()


def _ids_in(data: dict[str, Any]) -> set[str]:
    try:
        return sealed_key_ids(data)
    except ValueError:
        return set()  # a broken envelope: `open` reports it as tampered


#: The sealer of a namespace without a key: everything passes through.
PLAIN = Sealer(None)


def sealer_of(settings: Settings, *, repair: bool = True) -> Sealer:
    """The namespace's sealer: a ring on `<ns>.keys` when a namespace key is configured, else
    `PLAIN`.  Call `start()` before use (and `stop()`)."""
    from omstream.topics import Topics

    from .keyring import KeyRing
    from .wrapping import namespace_keys

    if not (settings.namespace_key or settings.namespace_key_file):
        return PLAIN
    keys = namespace_keys(settings.namespace_key, settings.namespace_key_file)
    return Sealer(KeyRing(settings.bootstrap, Topics.of(settings).keys, keys, repair=repair,
                          roll_after_ms=settings.shred_window_ms))
