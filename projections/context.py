"""The context-window projection: what the agent sees, rebuilt from the topics alone.

It folds `<ns>.messages` (raw history) and `<ns>.events` (what was observed) into one view per
thread: the observation text, the hints, and the messages no observation covers yet.  Every
message is in exactly one of the two: its id is either in an `observation-end`'s
`observedMessageIds` or still listed raw.  Events are applied once per `(memoryKey, seq)`, so a
re-sent event after a worker crash changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.messages import Message
from streams.engine.observations import append_observations, split_chunks

__all__ = ["ContextProjection", "ThreadView", "context_messages"]

PREAMBLE = "The following observations block contains your memory of past conversations with this user."
INSTRUCTIONS = (
    "IMPORTANT: refer to specific details from these observations and personalise your answer.\n\n"
    "KNOWLEDGE UPDATES: when observations disagree, the most recent one wins.\n\n"
    "PLANNED ACTIONS: a planned action whose date has passed has probably happened.\n\n"
    "MOST RECENT USER INPUT: the user's latest message is the strongest signal.\n\n"
    "SYSTEM REMINDERS: <system-reminder> content is internal guidance; do not mention it."
)
CONTINUATION = (
    "<system-reminder>Continue the conversation naturally and answer the latest message. The "
    "observations are background; do not mention memory or summaries. Messages after this "
    "reminder are newer and take priority.</system-reminder>"
)


@dataclass
class ThreadView:
    thread_id: str
    memory_key: str | None = None
    messages: dict[str, Message] = field(default_factory=dict)
    observed: set[str] = field(default_factory=set)
    observations: str = ""
    cursor: str | None = None
    generation: int = 0
    current_task: str | None = None
    suggested_response: str | None = None
    in_flight: set[str] = field(default_factory=set)
    last_seq: int = 0
    events: int = 0
    cycles: int = 0

    @property
    def blocked(self) -> bool:
        return bool(self.in_flight)

    def unobserved(self) -> list[Message]:
        rest = [m for i, m in self.messages.items() if i not in self.observed]
        return sorted(rest, key=lambda m: m.created_at)

    def snapshot(self) -> dict[str, Any]:
        raw = self.unobserved()
        return {
            "threadId": self.thread_id,
            "memoryKey": self.memory_key,
            "generation": self.generation,
            "cursor": self.cursor,
            "blocked": self.blocked,
            "observations": self.observations,
            "currentTask": self.current_task,
            "suggestedResponse": self.suggested_response,
            "cycles": self.cycles,
            "observedMessageIds": sorted(self.observed),
            "messages": [m.wire() for m in raw],
            "chat": context_messages(self, raw),
        }


def context_messages(view: ThreadView, raw: list[Message]) -> list[dict[str, str]]:
    """The window as ready-to-send chat messages (OpenAI / litellm shape)."""
    chat: list[dict[str, str]] = []
    if view.observations:
        chat.append({"role": "system", "content": f"{PREAMBLE}\n\n{INSTRUCTIONS}"})
        chat.append({"role": "system", "content": "<observations>"})
        # One message per boundary-delimited chunk keeps older chunks byte-identical (prompt caching).
        for chunk in split_chunks(view.observations):
            chat.append({"role": "system", "content": chunk})
        if view.current_task:
            chat.append({"role": "system", "content": f"<current-task>\n{view.current_task}\n</current-task>"})
        if view.suggested_response:
            chat.append({"role": "system",
                         "content": f"<suggested-response>\n{view.suggested_response}\n</suggested-response>"})
        chat.append({"role": "user", "content": CONTINUATION})
    for message in raw:
        role = "assistant" if message.role == "assistant" else ("system" if message.role == "system" else "user")
        chat.append({"role": role, "content": message.text()})
    return chat


class ContextProjection:
    """Per-thread views, fed record by record from the two topics."""

    def __init__(self) -> None:
        self.threads: dict[str, ThreadView] = {}

    def view(self, thread_id: str) -> ThreadView:
        if thread_id not in self.threads:
            self.threads[thread_id] = ThreadView(thread_id)
        return self.threads[thread_id]

    def apply_message(self, message: Message) -> None:
        view = self.view(message.thread_id)
        view.messages.setdefault(message.id, message)

    def apply_event(self, event: Any) -> bool:
        """Apply one `<ns>.events` record; False if it was a duplicate or not for a thread."""
        if event.thread_id is None:
            return False
        view = self.view(event.thread_id)
        if event.seq <= view.last_seq:
            return False
        view.last_seq = event.seq
        view.memory_key = event.memory_key
        view.events += 1
        data = event.data
        if event.type == "data-om-observation-start":
            view.in_flight.add(data.cycle_id)
        elif event.type == "data-om-observation-failed":
            view.in_flight.discard(data.cycle_id)
        elif event.type == "data-om-observation-end":
            view.in_flight.discard(data.cycle_id)
            view.cycles += 1
            if data.operation_type == "reflection":
                # A reflection is a new generation: its text replaces the whole log.
                view.observations = data.observations or ""
                view.suggested_response = data.suggested_response or view.suggested_response
            else:
                view.observed.update(data.observed_message_ids)
                if data.observations:
                    view.observations = append_observations(
                        view.observations, data.observations, data.cursor)
                view.cursor = data.cursor
                view.current_task = data.current_task
                view.suggested_response = data.suggested_response
            view.generation = data.generation
        elif event.type == "data-om-activation" and data.operation_type == "observation":
            view.cycles += 1
            view.observed.update(data.activated_message_ids)
            view.observations = append_observations(view.observations, data.observations or "", data.cursor)
            view.cursor = data.cursor
            view.current_task = view.suggested_response = None
        elif event.type == "data-om-activation":  # a buffered reflection became the new generation
            view.observations = data.observations or ""
            view.generation = data.generation_count
        elif event.type == "om-memory-deleted":
            self.threads.pop(event.thread_id, None)
        return True

