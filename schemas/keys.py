"""The memory key: which memory (and so which partition, which state) an input belongs to.

Every topic is keyed by it, so a producer, the fold and the read side must derive the same key
from the same thread and resource: it lives with the wire contract, not in the engine.
"""

from __future__ import annotations

from .config import OmConfig

__all__ = ["memory_key"]


def memory_key(om: OmConfig, thread_id: str | None, resource_id: str | None) -> str:
    """`thread:<threadId>` in thread scope; `resource:<resourceId>` (the thread's id when the
    input names no resource) in resource scope."""
    if om.scope == "resource":
        return f"resource:{resource_id or thread_id}"
    return f"thread:{thread_id}"
