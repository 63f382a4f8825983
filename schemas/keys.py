"""The memory key: which memory (and so which partition, which state) an input belongs to.

Every topic is keyed by it, so a producer, the fold and the read side must derive the same key
from the same thread and resource: it lives with the wire contract, not in the engine.

In resource scope the key is the resource's, and only the producer knows a thread's resource:
a message without `resourceId` is its own thread's resource (spec §3, "falls back to threadId"),
but a marker or a command without one cannot be routed, because the thread's messages may have
named a resource, and nothing on the log's way can look that up before the partition is chosen.
So such a control record is refused: by the client before it is sent (`UnroutedRecord`), and by
the worker as `invalid` for a producer that wrote it anyway (`unrouted`).
"""

from __future__ import annotations

from .config import OmConfig
from .errors import OmError

__all__ = ["UnroutedRecord", "memory_key", "unrouted"]


class UnroutedRecord(OmError, ValueError):
    """A control record that names no resource in resource scope: name the thread's resource
    (`resourceId`, `resource_id=`, `--resource`), or its thread id for a thread whose messages
    named none."""


def memory_key(om: OmConfig, thread_id: str | None, resource_id: str | None) -> str:
    """`thread:<threadId>` in thread scope; `resource:<resourceId>` (the thread's id when the
    input names no resource) in resource scope."""
    if om.scope == "resource":
        return f"resource:{resource_id or thread_id}"
    return f"thread:{thread_id}"


def unrouted(om: OmConfig, record_type: str, thread_id: str | None, resource_id: str | None) -> str | None:
    """Why a control record of `record_type` cannot be keyed (None when it can): in resource
    scope it must name its resource."""
    if om.scope != "resource" or resource_id:
        return None
    return (f"{record_type} of thread {thread_id!r} names no resourceId: in resource scope the memory key is "
            "resource:<resourceId>, so every step, turn end and command must name the thread's resource "
            "(its thread id, for a thread whose messages named none)")
