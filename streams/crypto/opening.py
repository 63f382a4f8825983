"""Opening sealed records where they are read: whose key sealed a record, and what a reader does
with one it cannot open.

`record_owner(data, key)` (`omstream.crypto.sealing`) names the owner `Sealer.open` needs from the
record's clear fields.

`Opener` is what a reader holds (`om serve`'s feeds, `om export`, `om tail`): `open(value, key)`
gives the record's bytes opened, or None when the record is to be passed over: `Shredded` (its
memory was deleted: counted, DEBUG) or `Tampered` (a warning without content).  An unmarked
record is returned as it is, without a parse.  A sealed record read without a key (`PLAIN`: no
namespace key configured for this process) is passed over too, with one warning naming the
setting: decoded as it is, its envelopes would pass for text.

`skeleton(data)` is a shredded record's clear part: its sealed fields removed (or emptied where
the schema needs a value).  What a projection may still apply of a deleted memory's event: ids,
`seq`, cursors and observed message ids, so a read model rebuilt after one thread of a resource
memory was deleted (which rolls the resource's key) keeps the other threads' observed messages
observed; the deletion event that follows restores the observations the resource kept.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .envelope import is_sealed
from .errors import KeyNotLoaded, Shredded, Tampered
from .fields import content_fields
from .sealing import PLAIN, Sealer, is_marked, record_owner

__all__ = ["NO_KEY", "SHREDDED", "TAMPERED", "Opener", "skeleton"]

log = logging.getLogger("omstream.crypto")

SHREDDED = "shredded"
TAMPERED = "tampered"
NO_KEY = "no-key"


#: Content fields a record's schema requires: emptied rather than removed in a skeleton.
_REQUIRED = frozenset({"data.message.content", "data.newTitle"})


def skeleton(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of the record `data` without the content its envelopes sealed."""
    out = dict(data)
    for path, holder, name in content_fields(out, copy_parents=True):
        if is_sealed(holder[name]):
            if path in _REQUIRED:
                holder[name] = ""
            else:
                del holder[name]
    out.pop("omSealed", None)
    return out


@dataclass
class Opener:
    """Opens the records a reader reads with `sealer`, and counts those it passes over."""

    sealer: Sealer = PLAIN
    passed: Tally[str] = field(default_factory=Tally)
    last: str | None = None  # why the last record `open` passed over was passed over

    @property
    def enabled(self) -> bool:
        return self.sealer.enabled

    async def prepare(self, values: Iterable[bytes | None]) -> None:
        """Load the keys the sealed records among `values` name (a batch's, before `open`)."""
        if self.sealer.enabled:
            await self.sealer.prepare(values)

    async def open_all(self, values: Iterable[bytes | None], key: str | None = None) -> list[bytes]:
        """A batch of records opened, in order (`prepare`, then `open`); those passed over (and
        tombstones) left out."""
        values = list(values)
        await self.prepare(values)
        return [opened for value in values if value is not None and (opened := self.open(value, key)) is not None]

    def open(self, value: bytes, key: str | None = None) -> bytes | None:
        """`value` opened; None when it is passed over (shredded or tampered).  A record that is
        not JSON is returned as it is: its decoder reports it."""
        if not is_marked(value):
            return value
        if not self.sealer.enabled:
            if not self.passed[NO_KEY]:
                log.warning("sealed records read without a namespace key are passed over: give this process "
                            "the namespace's key (OM_NAMESPACE_KEY or namespace_key_file)")
            self.passed[NO_KEY] += 1
            self.last = NO_KEY
            return None
        try:
            data = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
        if not isinstance(data, dict):
            return value
        owner = record_owner(data, key)
        try:
            return self.sealer.open(value, owner)
        except (Shredded, KeyNotLoaded):
            # After `prepare` an unknown key is one compaction removed: shredded as well.
            self.passed[SHREDDED] += 1
            self.last = SHREDDED
            log.debug("record of a deleted memory passed over", extra={"memoryKey": data.get("memoryKey") or key})
            return None
        except Tampered as exc:
            self.passed[TAMPERED] += 1
            self.last = TAMPERED
            log.warning("sealed record does not authenticate, passed over", extra={
                "memoryKey": data.get("memoryKey") or key, "type": data.get("type", "message"), "error": str(exc)})
            return None
