"""One thread's memory as an agent uses it, turn by turn: the protocol every agent loop follows.

    async with OmClient(settings) as om:
        memory = ThreadMemory(om, "t1", resource_id="u1")
        await memory.add([{"role": "user", "content": "Hi!"}])      # the turn's new messages
        window = await memory.step()                                # a step, then the window after it
        reply = await model(window["chat"])                         # observations + unobserved messages
        await memory.add([{"role": "assistant", "content": reply}])
        await memory.end_turn()

`step()` is where omstream checks its thresholds (an observation, a buffered chunk or an
activation may start right there), and the window it returns is read *after* that step, so it
holds the messages just added and every cycle the step triggered (read your own writes).  The
framework adapters (`omstream.integrations`) and `examples/agent_loop.py` are this protocol in
their framework's terms.

Every message is stored once: `add` skips an id this thread already holds (the ids the server
shows, learnt on first use, and the ids sent since), so an adapter may hand it a framework's
whole history each time.  Messages without an id get `<run>-<n>`, `<run>` new per
`ThreadMemory`.  Their `createdAt` is the time of `add`, strictly increasing, so the window keeps
them in the order given.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from omstream.engine.rules.resolution import resolve
from omstream.schemas.control import ThreadDeleted
from omstream.schemas.errors import OmError
from omstream.schemas.messages import Message
from omstream.schemas.positions import LogPosition

from .chat_records import ToolNames, message_from_chat
from .tools import RecallTool
from .working_memory_tool import WorkingMemoryTool

if TYPE_CHECKING:
    from .om_client import OmClient

__all__ = ["MemoryNotReady", "ThreadMemory", "empty_window"]

_TICK = timedelta(milliseconds=1)  # the wire keeps milliseconds


class MemoryNotReady(OmError, RuntimeError):
    """`om serve` did not show the thread's window after a step within the wait."""


def empty_window(thread_id: str) -> dict[str, Any]:
    """The window of a thread the memory holds nothing of yet."""
    return {"threadId": thread_id, "observations": "", "observedMessageIds": [], "messages": [], "chat": []}


class ThreadMemory:
    """The agent-loop protocol for one thread (see the module docstring)."""

    def __init__(self, client: OmClient, thread_id: str, *, resource_id: str | None = None,
                 base_url: str | None = None, wait: float = 120.0) -> None:
        self.client, self.thread_id, self.resource_id = client, thread_id, resource_id
        self.base_url, self.wait = base_url, wait
        self.tool_names = ToolNames()
        self._known: set[str] | None = None  # None until learnt from the server
        self._run, self._count = uuid.uuid4().hex[:8], 0
        self._clock: datetime | None = None
        self._last_id: str | None = None
        self._step_number = 0

    # --- writing ------------------------------------------------------------------------------
    def _created_at(self) -> datetime:
        now = datetime.now(UTC)
        self._clock = now if self._clock is None or now > self._clock else self._clock + _TICK
        return self._clock

    def _next_id(self) -> str:
        self._count += 1
        return f"{self._run}-{self._count}"

    async def known_ids(self) -> set[str]:
        """The ids of the thread's messages: those the server shows (learnt once) and those sent
        since."""
        if self._known is None:
            # wait=0: a cycle in flight does not change which messages the thread holds.
            window = await self.client.context(self.thread_id, wait=0, base_url=self.base_url)
            window = window or empty_window(self.thread_id)
            self._known = {*window["observedMessageIds"], *(m["id"] for m in window["messages"])}
            for chat in window["chat"]:
                self.tool_names.learn(chat)
        return self._known

    def message(self, chat: Mapping[str, Any]) -> Message:
        """`chat` (a chat message, its `id` optional) as a message of this thread."""
        return message_from_chat(chat, id=str(chat.get("id") or self._next_id()), thread_id=self.thread_id,
                                 resource_id=self.resource_id, created_at=self._created_at(),
                                 names=self.tool_names)

    async def add(self, messages: Iterable[Mapping[str, Any] | Message]) -> list[Message]:
        """Store the messages the thread does not hold yet, in order; returns those sent."""
        known = await self.known_ids()
        fresh: list[Message] = []
        for item in messages:
            if isinstance(item, Mapping) and item.get("id") in known:
                continue
            message = item if isinstance(item, Message) else self.message(item)
            if message.id in known or any(m.id == message.id for m in fresh):
                continue
            fresh.append(message)
        if fresh:
            await self.client.send_messages(fresh)
            known.update(m.id for m in fresh)
            self._last_id = fresh[-1].id
        return fresh

    # --- the turn -------------------------------------------------------------------------------
    async def step(self, *, model: str | None = None) -> dict[str, Any]:
        """Mark the turn's next step after the last message added, and return the context window
        after it (`MemoryNotReady` when `om serve` does not show it within the wait)."""
        position = await self.client.step_started(
            self.thread_id, step_number=self._step_number, resource_id=self.resource_id, model=model,
            after_message_id=self._last_id)
        self._step_number += 1
        return await self.window(after=position)

    async def window(self, *, after: LogPosition | None = None) -> dict[str, Any]:
        """The thread's context window (after the log position `after`, if given)."""
        window = await self.client.context(self.thread_id, after=after, wait=self.wait, base_url=self.base_url)
        if window is None:
            return empty_window(self.thread_id)
        if window.get("stale"):
            raise MemoryNotReady(f"om serve did not show thread {self.thread_id!r} after {after} "
                                 f"within {self.wait} s: is the worker running?")
        return window

    async def end_turn(self) -> None:
        """Mark the turn's end (after the last message added); the next step is step 0 again."""
        await self.client.turn_ended(self.thread_id, resource_id=self.resource_id, after_message_id=self._last_id)
        self._step_number = 0

    async def forget(self) -> None:
        """Delete the thread: its messages and its memory (`thread-deleted`)."""
        await self.client.send_control(ThreadDeleted(thread_id=self.thread_id, resource_id=self.resource_id,
                                                     at=datetime.now(UTC)))
        self._known, self._last_id, self._step_number = set(), None, 0
        self.tool_names.clear()

    def working_memory_tool(self) -> WorkingMemoryTool | None:
        """The `updateWorkingMemory` tool of this thread (`setWorkingMemory` with state signals),
        or None when the configuration keeps no working memory for the agent to write."""
        if not resolve(self.client.settings.om).working_memory.agent_managed:
            return None
        return WorkingMemoryTool(self.client, self.thread_id, resource_id=self.resource_id)

    def recall_tool(self) -> RecallTool:
        """The `recall` tool of this thread (give its `definition` to the model), shaped by the
        configuration's `retrieval` (its scope and whether search is on)."""
        return RecallTool(self.client, self.thread_id, base_url=self.base_url)
