"""Which fields of each wire record are content (encrypted) and which stay clear.

Content is what a user or a model said: message content (text and every part, attachments'
bytes, tool arguments and results), a reflection's guiding prompt, titles, a job's prompt, a
result's answer (on the log and in the cache), observations, hints and extracted values in
events, and an accepted message inside its event.  Everything else stays readable, because
routing, ordering, deduplication and dashboards need it: ids, memory keys, sequence numbers,
times, token counts, generations, cursors (a `createdAt`), lifecycle kinds and error texts.

A field is encrypted whole (a message's `content` list becomes one envelope), so its JSON type,
the count and kinds of its parts, and file names are hidden too.  Known clear leftovers, kept on
purpose: `metadata` of a message (provider, model, pass-through keys), error texts of failed
cycles and results (a provider's message), and model settings.

`encrypt_fields` / `decrypt_fields` work on the JSON dict of a record (camelCase, as on the
wire) and return a new dict that shares the unchanged values with the one given (do not mutate
either afterwards); the record is validated by its pydantic model after decryption.  A plain
producer's text may look like an envelope (`om1:a:b:c`): the wiring marks a sealed record (a
record header) and opens only those, so such a text is never taken for ciphertext.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from .envelope import DataKey, is_sealed, open_value, parse, seal_value

__all__ = ["CONTENT_FIELDS", "KeySource", "content_fields", "content_paths", "decrypt_fields", "encrypt_fields",
           "sealed_key_ids"]

_CYCLE_TEXT = ("data.observations", "data.currentTask", "data.suggestedResponse")

#: Content field paths by record `type` (a record without `type` is a message).  Types absent
#: here have no content (status, cycle starts, ignored results, temporal gaps, other controls).
CONTENT_FIELDS: dict[str, tuple[str, ...]] = {
    # <ns>.log: producers' records
    "message": ("content",),
    "reflect-requested": ("prompt",),
    "thread-patched": ("title",),
    "working-memory-set": ("workingMemory",),
    # <ns>.jobs, and results on <ns>.log and <ns>.cache
    "model-job": ("messages",),
    "model-result": ("output",),
    # <ns>.events
    "data-om-observation-end": (*_CYCLE_TEXT, "data.extractedValues"),
    "data-om-observation-failed": ("data.observations",),
    "data-om-buffering-end": (*_CYCLE_TEXT, "data.extractedValues"),
    "data-om-buffering-failed": ("data.observations",),
    "data-om-activation": _CYCLE_TEXT,
    "data-om-thread-update": ("data.oldTitle", "data.newTitle"),
    "om-memory-deleted": ("data.observations",),
    "om-message-accepted": ("data.message.content",),
    "om-working-memory-updated": ("data.workingMemory",),
}


class KeySource(Protocol):
    """Where the keys come from: a `KeyRing`, or its `KeyBook`."""

    def key(self, key_id: str) -> DataKey: ...


#: The same paths, split once (every sealed or opened record walks them).
_SPLIT: dict[str, tuple[tuple[str, tuple[str, ...], str], ...]] = {
    kind: tuple((path, tuple(path.split(".")[:-1]), path.rsplit(".", 1)[-1]) for path in paths)
    for kind, paths in CONTENT_FIELDS.items()}


def content_paths(record: dict[str, Any]) -> tuple[str, ...]:
    return CONTENT_FIELDS.get(str(record.get("type", "message")), ())


def content_fields(record: dict[str, Any], *, copy_parents: bool = False) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(path, the dict holding the field, the field's name) for each content field present.
    `copy_parents`: `record` is a fresh shallow copy, and the dicts on each path are copied too
    (what is replaced is never shared with the caller's record; the rest may be)."""
    for path, parents, name in _SPLIT.get(str(record.get("type", "message")), ()):
        holder: Any = record
        for part in parents:
            child = holder.get(part) if isinstance(holder, dict) else None
            if copy_parents and isinstance(child, dict):
                child = holder[part] = dict(child)
            holder = child
        if isinstance(holder, dict) and holder.get(name) is not None:
            yield path, holder, name


def encrypt_fields(record: dict[str, Any], key: DataKey, *, context: bytes | None = None) -> dict[str, Any]:
    """A copy of `record` with its content fields sealed under the memory's `key`.

    `context`: None at the edge (random nonces); the output's identity (such as its event id) in
    the worker, so a refold writes the same bytes (`omstream.crypto.envelope`)."""
    out = dict(record)
    for path, holder, name in content_fields(out, copy_parents=True):
        if not is_sealed(holder[name]):
            holder[name] = seal_value(holder[name], key, path, context=context)
    return out


def decrypt_fields(record: dict[str, Any], memory_key: str, keys: KeySource) -> dict[str, Any]:
    """A copy of `record` with its sealed content fields opened.

    Raises `Shredded` (the memory was deleted: pass the record over), `Tampered` (a ciphertext
    edited or moved from another memory or field), or `KeyNotLoaded` (resolve the key ids of
    `sealed_key_ids` first).  A field that is not sealed (a plain producer's) is left as it is."""
    out = dict(record)
    for path, holder, name in content_fields(out, copy_parents=True):
        if is_sealed(holder[name]):
            env = parse(holder[name])
            holder[name] = open_value(env, keys.key(env.key_id), memory_key, path)
    return out


def sealed_key_ids(record: dict[str, Any]) -> set[str]:
    """The key ids the record's envelopes name (to `KeyRing.resolve` before decrypting)."""
    return {parse(holder[name]).key_id for _, holder, name in content_fields(record) if is_sealed(holder[name])}
