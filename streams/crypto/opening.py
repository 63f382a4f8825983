"""Opening sealed records where they are read: whose key sealed a record, and what a reader does
with one it cannot open.

`record_owner(data, key)` names the owner `Sealer.open` needs from the record's clear fields: the
memory key, but a message of a resource memory (on `<ns>.log`, or inside `om-message-accepted`)
is its thread's (`content_owner`).  The thread id and the type stay clear in a sealed record, so
the owner is known without any key.

`Opener` is what a reader holds (`om serve`'s feeds, `om export`, `om tail`): `open(value, key)`
gives the record's bytes opened, or None when the record is to be passed over: `Shredded` (its
memory was deleted: counted, DEBUG) or `Tampered` (a warning without content).  An unmarked
record, or any record under `PLAIN`, is returned as it is, without a parse.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .errors import KeyNotLoaded, Shredded, Tampered
from .sealing import PLAIN, Sealer, content_owner, is_marked

__all__ = ["SHREDDED", "TAMPERED", "Opener", "record_owner"]

log = logging.getLogger("omstream.crypto")

SHREDDED = "shredded"
TAMPERED = "tampered"


def record_owner(data: dict[str, Any], key: str | None = None) -> str:
    """Whose data key sealed the record `data` (its JSON), the record key being `key` (an event
    names its memory itself)."""
    memory = key or str(data.get("memoryKey") or "")
    kind = data.get("type", "message")
    if kind == "message":
        return content_owner(memory, data.get("threadId"), is_message=True)
    if kind == "om-message-accepted":
        body = data.get("data")
        message = body.get("message") if isinstance(body, dict) else None
        thread = message.get("threadId") if isinstance(message, dict) else None
        return content_owner(memory, thread or data.get("threadId"), is_message=True)
    return memory


@dataclass
class Opener:
    """Opens the records a reader reads with `sealer`, and counts those it passes over."""

    sealer: Sealer = PLAIN
    passed: Tally[str] = field(default_factory=Tally)

    @property
    def enabled(self) -> bool:
        return self.sealer.enabled

    async def prepare(self, values: Iterable[bytes | None]) -> None:
        """Load the keys the sealed records among `values` name (a batch's, before `open`)."""
        if self.sealer.enabled:
            await self.sealer.prepare(values)

    def open(self, value: bytes, key: str | None = None) -> bytes | None:
        """`value` opened; None when it is passed over (shredded or tampered).  A record that is
        not JSON is returned as it is: its decoder reports it."""
        if not self.sealer.enabled or not is_marked(value):
            return value
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
            log.debug("record of a deleted memory passed over", extra={"memoryKey": data.get("memoryKey") or key})
            return None
        except Tampered as exc:
            self.passed[TAMPERED] += 1
            log.warning("sealed record does not authenticate, passed over", extra={
                "memoryKey": data.get("memoryKey") or key, "type": data.get("type", "message"), "error": str(exc)})
            return None
