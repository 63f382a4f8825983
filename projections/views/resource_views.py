"""The views of a resource memory's threads (scope `resource`, spec §6.10).

In resource scope one memory (`resource:<resourceId>`) holds every thread of a user, and the
fold emits its events under that key, each naming the thread it is about.  The read side still
serves one window per thread, built from two kinds of state:

- the memory's, which every thread of it shares: the observation log (the threads' `<thread
  id>` sections merged by date), the generation, the cursor, and the cycle in flight (a
  blocking cycle holds the whole memory, so every thread's context waits for it);
- the thread's own: its messages, which of them are observed, its hints, title and extracted
  values, its last failure.

The projection applies an event to the thread it names, then hands the memory's fields to the
memory's other threads (`share`), so each stored view is complete on its own and a restart
reads it back as it is.  A thread's window shows the other threads' unobserved messages as
`<other-conversation>` blocks (`other_conversations`), rendered as the fold renders them for
its threshold (`omstream.engine.prompting.window`), so the agent reads what the observer counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omstream.engine.cycles.thread_deletion import without_thread_sections
from omstream.engine.prompting.sections import merge_section, shown_thread_id
from omstream.engine.prompting.transcript import SIGNAL, message_lines, observer_transcript
from omstream.engine.prompting.window import OTHER_PART_LENGTH
from omstream.engine.rules.resolution import resolve
from omstream.engine.rules.temporal import is_temporal_marker, temporal_marker_id
from omstream.engine.rules.tokens import get_counter
from omstream.engine.state import PendingMessage
from omstream.schemas.base import iso
from omstream.schemas.config import OmConfig
from omstream.schemas.messages import Message

if TYPE_CHECKING:
    from .context import ThreadView

__all__ = ["MEMORY_FIELDS", "ResourceRendering", "concerns", "is_resource_key", "merge_thread_observations",
           "of_thread", "one_thread_of_resource", "other_conversations", "share", "without_thread_text"]

#: The fields of a thread's view that are its memory's, the same in every thread of a resource.
MEMORY_FIELDS = ("observations", "generation", "cursor", "in_flight", "held")



@dataclass(frozen=True)
class ResourceRendering:
    """How the fold writes a resource memory's thread ids and transcripts, which the read side
    must match: ids obscured or not (`obscureThreadIds`), and the token counter that outlines
    tool arguments in a transcript."""

    obscure_thread_ids: bool = False
    token_counter: str = "tokenx"

    @classmethod
    def of(cls, om: OmConfig) -> ResourceRendering:
        return cls(resolve(om).obscure_thread_ids, om.token_counter)


def is_resource_key(memory_key: str | None) -> bool:
    return bool(memory_key) and str(memory_key).startswith("resource:")


def share(source: ThreadView, others: Iterable[ThreadView]) -> list[str]:
    """Give `others` the memory's fields of `source`; the threads whose view changed."""
    changed = []
    for view in others:
        if view is source:
            continue
        for name in MEMORY_FIELDS:
            value = getattr(source, name)
            setattr(view, name, set(value) if isinstance(value, set) else value)
        changed.append(view.thread_id)
    return changed


def merge_thread_observations(view: ThreadView, text: str, observed: Iterable[str], cursor: str | None,
                              obscure: bool) -> str:
    """The memory's log after the thread's observation `text` (its `<thread id>` section merged
    by date, as the fold merges it: `omstream.engine.prompting.sections`), the boundary dated by the
    thread's newest observed message."""
    times = [view.messages[i].created_at for i in observed if i in view.messages]
    boundary = iso(max(times)) if times else cursor or ""
    return merge_section(view.observations, shown_thread_id(view.thread_id, obscure), text, boundary)


def _pending(message: Message, counter: str) -> PendingMessage:
    """A message as the observer transcript reads it; a temporal-gap marker as its signal line."""
    if is_temporal_marker(message.id):
        text = message.text().removeprefix("<system-reminder>").removesuffix("</system-reminder>")
        return PendingMessage(id=message.id, role="user", created_at=message.created_at, text=text,
                              title=SIGNAL, tokens=0)
    return PendingMessage(id=message.id, role=message.role, created_at=message.created_at, text=message.text(),
                          tokens=0, lines=message_lines(message, get_counter(counter).count))


def _in_fold_order(view: ThreadView) -> list[Message]:
    """The thread's unobserved messages in the order the fold keeps them: as they joined the
    memory, each temporal-gap marker right after the message it was made for (its event comes
    first on the topic)."""
    rest = {i: view.messages[i] for i in view.messages if i not in view.observed}
    ordered: list[Message] = []
    for message_id, message in rest.items():
        if is_temporal_marker(message_id):
            continue
        ordered.append(message)
        marker = rest.get(temporal_marker_id(message_id))
        if marker is not None:
            ordered.append(marker)
    placed = {m.id for m in ordered}
    return ordered + [m for i, m in rest.items() if i not in placed]  # a marker without its message


def other_conversations(view: ThreadView, siblings: Iterable[ThreadView], rendering: ResourceRendering,
                        time_zone: str) -> str:
    """The other threads' unobserved messages as `view`'s window shows them: one
    `<other-conversation id="…">` block per thread, threads by their oldest unobserved message
    (the first to join the memory among equals), blank lines between ("" when none)."""
    groups: list[tuple[Any, str, list[Message]]] = []
    for other in siblings:
        if other.thread_id == view.thread_id:
            continue
        unobserved = _in_fold_order(other)
        if unobserved:
            groups.append((min(m.created_at for m in unobserved), other.thread_id, unobserved))
    groups.sort(key=lambda group: group[0])
    return "\n\n".join(
        f'<other-conversation id="{shown_thread_id(thread, rendering.obscure_thread_ids)}">\n'
        f"{_transcript(messages, rendering, time_zone)}\n</other-conversation>"
        for _, thread, messages in groups)


def _transcript(messages: list[Message], rendering: ResourceRendering, time_zone: str) -> str:
    return observer_transcript([_pending(m, rendering.token_counter) for m in messages], time_zone,
                               max_part_length=OTHER_PART_LENGTH)


def of_thread(event: Any, thread_id: str) -> bool:
    """Whether an event of a resource memory is the thread's own (its messages, and every event
    that names it)."""
    if event.type == "om-message-accepted":
        return bool(event.data.message.thread_id == thread_id)
    return bool(event.thread_id == thread_id)


def one_thread_of_resource(event: Any) -> bool:
    """Whether an `om-memory-deleted` deletes one thread of a resource memory (the others stay)."""
    return (is_resource_key(event.memory_key) and event.data.reason == "thread-deleted"
            and event.thread_id is not None)


def without_thread_text(document: Any, thread_id: str) -> Any:
    """`document` (an event as JSON) with every `<thread id>` section of `thread_id` cut out of
    its strings, as the fold cuts them from the log when the thread is deleted; the document
    itself when no string held one.  Memory-wide events keep a deleted thread's sections in
    their text (a reflection's log, an earlier deletion's remaining observations), so the
    history passes them through this before serving them again.  Both forms of the id are
    cut, since the history does not know whether the memory obscured it; a sealed string holds
    no section and stays as it is (its key's shred makes it unreadable instead)."""
    shown = (shown_thread_id(thread_id, False), shown_thread_id(thread_id, True))

    def cut(value: Any) -> Any:
        if isinstance(value, str):
            for thread in shown:
                if f'<thread id="{thread}">' in value:
                    value = without_thread_sections(value, thread)
            return value
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        if isinstance(value, list):
            return [cut(v) for v in value]
        return value

    cut_document = cut(document)
    return document if cut_document == document else cut_document


def concerns(event: Any, thread_id: str) -> bool:
    """Whether a thread's feed shows this event of its resource memory.

    A thread's feed shows its own events (its messages, status, title updates, and its own
    start/end/failed pair of every observation cycle: a cycle that covers several threads
    emits one pair per thread, sharing the cycle id, `threadIds` naming them all) and the
    memory-wide ones (reflections of the resource's log, deletions, anything that names no
    thread).  Not the other threads' pairs of a shared cycle: they carry the other threads'
    observations, and an AI SDK client reconciles parts by type and id, so a second pair with
    the same cycle id would overwrite this thread's in its message."""
    if event.type == "om-message-accepted":
        return of_thread(event, thread_id)
    if of_thread(event, thread_id) or event.thread_id is None or event.type == "om-memory-deleted":
        return True
    return getattr(event.data, "operation_type", None) == "reflection"
