"""ThreadMemory, the agent-loop protocol, against a recording stand-in of OmClient's calls."""

import asyncio
from typing import Any

import pytest

from omstream.client.thread_memory import MemoryNotReady, ThreadMemory
from omstream.schemas.control import ThreadDeleted
from omstream.schemas.positions import LogPosition


class Recorder:
    """The OmClient calls ThreadMemory makes, recorded; `window` is what `context` answers."""

    def __init__(self, window: dict[str, Any] | None = None) -> None:
        self.window, self.calls = window, []
        self.offset = 0

    def _position(self) -> LogPosition:
        self.offset += 1
        return LogPosition(partition=0, offset=self.offset)

    async def context(self, thread_id, *, after=None, wait=10.0, base_url=None):
        self.calls.append(("context", after, wait))
        return self.window

    async def send_messages(self, messages):
        self.calls.append(("send", [m.id for m in messages]))
        self.sent = list(messages)
        return [self._position() for _ in messages]

    async def step_started(self, thread_id, *, step_number, resource_id=None, model=None, after_message_id=None):
        self.calls.append(("step", step_number, after_message_id))
        return self._position()

    async def turn_ended(self, thread_id, *, resource_id=None, after_message_id=None):
        self.calls.append(("turn", after_message_id))
        return self._position()

    async def send_control(self, record):
        self.calls.append(("control", record))
        return self._position()


def window(observed=(), raw=(), stale=False) -> dict[str, Any]:
    return {"threadId": "t", "observations": "* 🔴 (09:00) noted", "observedMessageIds": list(observed),
            "messages": [{"id": i} for i in raw], "chat": [{"role": "system", "content": "obs"}], "stale": stale}


def test_each_message_is_sent_once_and_ids_the_thread_holds_are_skipped():
    om = Recorder(window(observed=["a"], raw=["b"]))
    memory = ThreadMemory(om, "t", resource_id="u")

    async def run():
        first = await memory.add([{"id": "a", "role": "user", "content": "old"},
                                  {"id": "b", "role": "assistant", "content": "old"},
                                  {"id": "c", "role": "user", "content": "new"},
                                  {"role": "assistant", "content": "no id"}])
        again = await memory.add([{"id": "c", "role": "user", "content": "new"}])
        return first, again

    first, again = asyncio.run(run())
    assert [m.id for m in first][0] == "c" and len(first) == 2 and again == []
    assert first[1].id.endswith("-1") and first[0].created_at < first[1].created_at
    assert [c[0] for c in om.calls] == ["context", "send"]  # the thread's ids learnt once, without waiting
    assert om.calls[0][2] == 0


def test_steps_follow_the_last_message_count_within_the_turn_and_restart_after_its_end():
    om = Recorder(window())
    memory = ThreadMemory(om, "t")

    async def run():
        await memory.add([{"id": "u1", "role": "user", "content": "hi"}])
        shown = await memory.step(model="m")
        await memory.step()
        await memory.add([{"id": "a1", "role": "assistant", "content": "hello"}])
        await memory.end_turn()
        await memory.step()
        return shown

    shown = asyncio.run(run())
    steps = [c for c in om.calls if c[0] in ("step", "turn")]
    assert steps == [("step", 0, "u1"), ("step", 1, "u1"), ("turn", "a1"), ("step", 0, "a1")]
    # the window is read after the step's own position
    assert [c[1] for c in om.calls if c[0] == "context"][1:] == [LogPosition(0, 2), LogPosition(0, 3),
                                                                 LogPosition(0, 6)]
    assert shown["chat"] == [{"role": "system", "content": "obs"}]


def test_a_window_not_shown_in_time_is_an_error_and_an_unknown_thread_an_empty_window():
    async def step(answer):
        return await ThreadMemory(Recorder(answer), "t").step()

    with pytest.raises(MemoryNotReady, match="is the worker running"):
        asyncio.run(step(window(stale=True)))
    assert asyncio.run(step(None))["chat"] == []


def test_forget_deletes_the_thread_and_forgets_its_ids():
    om = Recorder(window(observed=["a"]))
    memory = ThreadMemory(om, "t", resource_id="u")

    async def run():
        await memory.add([{"id": "x", "role": "user", "content": "hi"}])
        await memory.forget()
        return await memory.known_ids()

    assert asyncio.run(run()) == set()
    [deleted] = [c[1] for c in om.calls if c[0] == "control"]
    assert isinstance(deleted, ThreadDeleted) and deleted.thread_id == "t" and deleted.resource_id == "u"


@pytest.mark.parametrize("options, scope, search", [
    ({}, "thread", False),
    ({"scope": "resource"}, "resource", False),
    ({"retrieval": True}, "resource", False),
    ({"retrieval": {"scope": "thread", "vector": True}}, "thread", True),
])
def test_the_recall_tool_takes_its_scope_and_search_from_the_configuration(options, scope, search):
    from omstream.schemas.config import load_om_config
    from omstream.settings import Settings

    om = Recorder()
    om.settings = Settings(om=load_om_config(options))
    properties = ThreadMemory(om, "t").recall_tool().definition["function"]["parameters"]["properties"]
    assert ("threadId" in properties) == (scope == "resource")
    assert ("query" in properties) == search
