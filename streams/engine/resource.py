"""A resource memory's threads: their unobserved messages, the window one thread sees, and which
threads one observation covers (spec §6.10).

In resource scope every thread of a user folds into one memory, on one partition, in log order.
The unobserved messages stay in `state.pending`, each tagged with its thread.  A thread's window
is its own unobserved messages plus, as `<other-conversation>` blocks, the other threads'; both
count toward the threshold.  An observation picks threads largest first until the picked tokens
reach the threshold, orders them by their oldest message, and batches them by
`observation.maxTokensPerBatch`: one observer job per batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .sections import shown_thread_id
from .state import MemoryState, PendingMessage
from .tokens import count_messages
from .transcript import observer_transcript

if TYPE_CHECKING:  # step.py measures windows with this module
    from .step import EngineConfig

__all__ = ["OTHER_PART_LENGTH", "is_resource", "other_conversations", "pending_by_thread", "plan_batches",
           "thread_of", "thread_tokens", "window_tokens"]

#: Other threads' messages are cut to this many characters per part (spec §7.2).
OTHER_PART_LENGTH = 500


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


def other_conversations(state: MemoryState, thread_id: str | None, config: EngineConfig) -> str:
    """The other threads' unobserved messages as `thread_id`'s window shows them: one
    `<other-conversation id="…">` block per thread, blank lines between ("" when none)."""
    obscure = config.resolved.obscure_thread_ids
    blocks = [
        f'<other-conversation id="{shown_thread_id(thread, obscure)}">\n'
        f"{observer_transcript(messages, config.om.time_zone, max_part_length=OTHER_PART_LENGTH)}\n"
        "</other-conversation>"
        for thread, messages in pending_by_thread(state).items() if thread != thread_id
    ]
    return "\n\n".join(blocks)


def window_tokens(state: MemoryState, thread_id: str | None, config: EngineConfig) -> int:
    """The pending tokens of `thread_id`'s window: its messages plus the other threads' blocks
    (spec §6.1); without a thread (a command for the whole resource), every message."""
    if thread_id is None:
        return count_messages([m.tokens for m in state.pending])
    own = [m.tokens for m in state.pending if thread_of(m, state) == thread_id]
    others = other_conversations(state, thread_id, config)
    return count_messages(own) + (config.counter.count(others) if others else 0)


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
