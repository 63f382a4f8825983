"""A resource memory's threads: their unobserved messages and which threads one observation
covers (spec §6.10); the window one thread sees is `prompting.window`'s.

In resource scope every thread of a user folds into one memory, on one partition, in log order.
The unobserved messages stay in `state.pending`, each tagged with its thread.  A thread's window
is its own unobserved messages plus, as `<other-conversation>` blocks, the other threads'; both
count toward the threshold.  An observation picks threads largest first until the picked tokens
reach the threshold, orders them by their oldest message, and batches them by
`observation.maxTokensPerBatch`: one observer job per batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..state import MemoryState, PendingMessage
from .tokens import count_messages

if TYPE_CHECKING:
    from ..step import EngineConfig

__all__ = ["is_resource", "pending_by_thread", "plan_batches", "thread_of", "thread_tokens"]


def is_resource(config: EngineConfig) -> bool:
    return config.resolved.scope == "resource"


def thread_of(message: PendingMessage, state: MemoryState) -> str:
    return message.thread_id or state.thread_id


def pending_by_thread(state: MemoryState) -> dict[str, tuple[PendingMessage, ...]]:
    """The unobserved messages of each thread, threads ordered by their oldest message (the
    first in the log among equal times)."""
    groups: dict[str, list[PendingMessage]] = {}
    for message in state.pending:
        groups.setdefault(thread_of(message, state), []).append(message)
    order = sorted(groups, key=lambda t: min(m.created_at for m in groups[t]))
    return {t: tuple(groups[t]) for t in order}


def thread_tokens(messages: tuple[PendingMessage, ...]) -> int:
    return count_messages([m.tokens for m in messages])


def plan_batches(state: MemoryState, threshold: int, max_per_batch: int, *,
                 everything: bool = False) -> tuple[tuple[str, ...], ...]:
    """The threads one observation covers, as batches (spec §6.10): largest first until the
    picked tokens reach `threshold` (all of them when `everything`), then in order of their
    oldest message, consecutive threads sharing a batch while it stays within
    `max_per_batch` (a thread larger than that is a batch of its own)."""
    groups = pending_by_thread(state)
    sizes = {thread: thread_tokens(messages) for thread, messages in groups.items()}
    picked: set[str] = set()
    total = 0
    for thread in sorted(groups, key=lambda t: -sizes[t]):  # stable: the oldest first among equals
        if picked and total >= threshold and not everything:
            break
        picked.add(thread)
        total += sizes[thread]
    batches: list[tuple[str, ...]] = []
    current: list[str] = []
    tokens = 0
    for thread in (t for t in groups if t in picked):
        if current and tokens + sizes[thread] > max_per_batch:
            batches.append(tuple(current))
            current, tokens = [], 0
        current.append(thread)
        tokens += sizes[thread]
    if current:
        batches.append(tuple(current))
    return tuple(batches)
