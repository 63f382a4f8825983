"""Events of `<ns>.events` as the fold writes them, built by hand for the search index's tests
(until the engine emits observation groups, the tests wrap observation lines themselves)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from omstream.schemas.events import (
    Activation,
    ActivationData,
    MarkerConfig,
    MemoryDeleted,
    MemoryDeletedData,
    MessageAccepted,
    MessageAcceptedData,
    ObservationEnd,
    ObservationEndData,
    ThreadUpdate,
    ThreadUpdateData,
)
from omstream.schemas.messages import Message

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)


def group_id(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:16]


def group(gid: str, first: str, last: str, lines: list[str], kind: str | None = None) -> str:
    """One observation group in the spec's format."""
    extra = f' kind="{kind}"' if kind else ""
    return f'<observation-group id="{gid}" range="{first}:{last}"{extra}>\n' + "\n".join(lines) + \
        "\n</observation-group>"


class Memory:
    """One memory's events, with increasing `seq`s and event times."""

    def __init__(self, memory_key: str, thread_id: str, resource_id: str = "u1") -> None:
        self.memory_key, self.thread_id, self.resource_id = memory_key, thread_id, resource_id
        self.seq = 0

    def _envelope(self, thread_id: str | None = None) -> dict:
        self.seq += 1
        return {"event_id": f"{self.memory_key}:{self.seq}", "memory_key": self.memory_key,
                "thread_id": thread_id or self.thread_id, "seq": self.seq,
                "event_time": T0 + timedelta(minutes=self.seq)}

    def message(self, i: int, text: str, role: str = "user", thread_id: str | None = None) -> MessageAccepted:
        thread = thread_id or self.thread_id
        msg = Message(id=f"{thread}-m{i}", thread_id=thread, resource_id=self.resource_id, role=role,
                      content=text, created_at=T0 + timedelta(minutes=i))
        return MessageAccepted(**self._envelope(thread), data=MessageAcceptedData(message=msg))

    def observed(self, observations: str, thread_id: str | None = None,
                 operation: str = "observation") -> ObservationEnd:
        envelope = self._envelope(thread_id)
        return ObservationEnd(**envelope, data=ObservationEndData(
            cycle_id=f"c{self.seq}", operation_type=operation, completed_at=envelope["event_time"],
            duration_ms=0, tokens_observed=1, observation_tokens=1, observations=observations,
            record_id="r", thread_id=envelope["thread_id"]))

    def activated(self, observations: str) -> Activation:
        envelope = self._envelope()
        return Activation(**envelope, data=ActivationData(
            cycle_id=f"c{self.seq}", operation_type="observation", activated_at=envelope["event_time"],
            chunks_activated=1, tokens_activated=1, observation_tokens=1, messages_activated=1,
            record_id="r", thread_id=self.thread_id, generation_count=0,
            config=MarkerConfig(message_tokens=1, observation_tokens=1, scope="thread"),
            observations=observations))

    def titled(self, title: str) -> ThreadUpdate:
        envelope = self._envelope()
        return ThreadUpdate(**envelope, data=ThreadUpdateData(
            cycle_id="c", thread_id=self.thread_id, new_title=title, timestamp=envelope["event_time"]))

    def deleted(self, thread_id: str | None = None, keeps: str | None = None) -> MemoryDeleted:
        """The memory deleted; with `thread_id` and `keeps`, one thread of a resource memory
        (`keeps`: the observations the resource keeps)."""
        return MemoryDeleted(**self._envelope(thread_id), data=MemoryDeletedData(
            reason="thread-deleted", generation_count=0, observations=keeps))
