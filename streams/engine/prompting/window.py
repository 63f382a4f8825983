"""The window one thread of a resource memory sees: its own unobserved messages plus, as
`<other-conversation>` blocks, the other threads' (spec §6.1, §6.10, §7.2).

Both count toward the threshold (`window_tokens`, which `step.Step.pending_tokens` reads), and
the Observer and the agent are shown the same blocks (`other_conversations`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..rules.resource import pending_by_thread, thread_of
from ..rules.tokens import count_messages
from ..state import MemoryState
from .sections import shown_thread_id
from .transcript import observer_transcript

if TYPE_CHECKING:  # step.py measures windows with this module
    from ..step import EngineConfig

__all__ = ["OTHER_PART_LENGTH", "other_conversations", "window_tokens"]

#: Other threads' messages are cut to this many characters per part (spec §7.2).
OTHER_PART_LENGTH = 500


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
