"""The OpenAI Agents SDK adapter without a broker: Responses items -> chat messages -> stored
messages -> chat (as the window gives it) -> items, and `OmSession`'s bookkeeping (steps, turn
ends, pop, clear) against a client that records what it was asked to send."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("agents")

from agents.memory import Session  # noqa: E402
from agents.testing import assistant_message, function_call  # noqa: E402

from omstream.client.chat_records import message_from_chat  # noqa: E402
from omstream.integrations.openai_agents import ImmutableHistory, OmSession  # noqa: E402
from omstream.integrations.openai_agents_items import (  # noqa: E402
    FAKE_ID,
    UnsupportedItem,
    chat_to_items,
    items_to_chat,
)
from omstream.projections.views.chat import chat_messages  # noqa: E402

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def stored_and_read_back(chat: list[dict]) -> list[dict]:
    """Chat messages stored as messages, then shown again as the window's chat shows them."""
    messages = [message_from_chat(c, id=c.get("id") or f"m{i}", thread_id="t", resource_id=None, created_at=NOW)
                for i, c in enumerate(chat)]
    return chat_messages(messages)


def dumped(item) -> dict:
    return item.model_dump(exclude_unset=True)


def test_a_conversation_with_a_tool_call_round_trips():
    items = [
        {"role": "user", "content": "What's the weather in Lyon?"},
        dumped(function_call("weather", {"city": "Lyon"}, call_id="call_1", item_id="fc_1")),
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
        dumped(assistant_message("It is sunny in Lyon.", item_id="msg_1")),
    ]
    chat = items_to_chat(items)
    assert chat == [
        {"role": "user", "content": "What's the weather in Lyon?"},
        {"role": "assistant", "content": None, "id": "fc_1",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "weather", "arguments": '{"city":"Lyon"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C", "id": "call_1:output"},
        {"role": "assistant", "content": "It is sunny in Lyon.", "id": "msg_1"},
    ]
    back = chat_to_items(stored_and_read_back(chat))
    assert back == [
        {"type": "message", "role": "user", "content": "What's the weather in Lyon?"},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Lyon"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
        {"type": "message", "role": "assistant", "content": "It is sunny in Lyon."},
    ]
    # ... and once more through the conversion: a fixed point.
    assert chat_to_items(items_to_chat(back)) == back


def test_parallel_calls_stay_one_assistant_message_so_each_result_finds_its_call():
    items = [
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}", "id": FAKE_ID},
        {"type": "function_call", "call_id": "b", "name": "g", "arguments": '{"x": 1}', "id": FAKE_ID},
        {"type": "function_call_output", "call_id": "a", "output": "A"},
        {"type": "function_call_output", "call_id": "b", "output": [{"type": "input_text", "text": "B"}]},
    ]
    chat = items_to_chat(items)
    assert [c["role"] for c in chat] == ["assistant", "tool", "tool"]
    assert chat[0]["id"] == "a" and [t["id"] for t in chat[0]["tool_calls"]] == ["a", "b"]  # the fake id is no id
    assert chat[2]["content"] == "B"
    back = chat_to_items(stored_and_read_back(chat))
    assert [(i["type"], i["call_id"]) for i in back] == [
        ("function_call", "a"), ("function_call", "b"), ("function_call_output", "a"), ("function_call_output", "b")]
    assert [i.get("output") for i in back[2:]] == ["A", "B"]


def test_roles_content_parts_and_what_is_skipped_or_refused():
    items = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Look:"},
            {"type": "input_image", "image_url": "https://example.org/cat.png", "detail": "low"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "id": "msg_2", "status": "completed",
         "content": [{"type": "output_text", "text": "A cat", "annotations": []},
                     {"type": "refusal", "refusal": ", no more."}]},
    ]
    chat = items_to_chat(items)
    assert chat == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                     {"type": "image_url", "image_url": {"url": "https://example.org/cat.png",
                                                                         "detail": "low"}}]},
        {"role": "assistant", "content": "A cat, no more.", "id": "msg_2"},
    ]
    back = chat_to_items(stored_and_read_back(chat))
    assert back[0] == {"type": "message", "role": "system", "content": "Be brief."}
    assert back[1]["role"] == "user" and back[1]["content"][0] == {"type": "input_text", "text": "Look:"}
    assert back[1]["content"][1]["type"] == "input_image"
    assert back[1]["content"][1]["image_url"] == "https://example.org/cat.png"
    assert back[2] == {"type": "message", "role": "assistant", "content": "A cat, no more."}

    with pytest.raises(UnsupportedItem, match="web_search_call"):
        items_to_chat([{"type": "web_search_call", "id": "ws_1", "status": "completed"}])
    with pytest.raises(UnsupportedItem, match="file_id"):
        items_to_chat([{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}])


def test_a_window_whose_call_was_observed_keeps_its_result_as_a_user_note():
    # The call was observed, its result is still raw: the window shows the result as a note.
    chat = [{"role": "system", "content": "<observations>\n* user asked about Lyon\n</observations>"},
            {"role": "user", "content": [{"type": "text", "text": "[Tool weather (call call_1, made earlier) returned:]"},
                                         {"type": "text", "text": "sunny"}]}]
    items = chat_to_items(chat)
    assert items[0] == {"type": "message", "role": "system", "content": chat[0]["content"]}
    assert items[1]["role"] == "user" and items[1]["content"][1] == {"type": "input_text", "text": "sunny"}


# --- OmSession's bookkeeping, against a recording client -----------------------------------------
class RecordingClient:
    """What `ThreadMemory` asks of an `OmClient`, recorded; the window is what was sent."""

    def __init__(self) -> None:
        self.sent: list = []
        self.steps: list[str | None] = []
        self.turn_ends: list[str | None] = []
        self.controls: list = []

    async def context(self, thread_id, *, after=None, wait=0, base_url=None):
        return {"threadId": thread_id, "observations": "", "observedMessageIds": [], "stale": False,
                "messages": [{"id": m.id} for m in self.sent], "chat": chat_messages(self.sent)}

    async def send_messages(self, messages):
        self.sent += list(messages)
        return []

    async def step_started(self, thread_id, *, step_number, resource_id=None, model=None, after_message_id=None):
        self.steps.append(after_message_id)
        return None

    async def turn_ended(self, thread_id, *, resource_id=None, after_message_id=None):
        self.turn_ends.append(after_message_id)

    async def send_control(self, record):
        self.controls.append(record)


async def test_the_session_marks_steps_and_turn_ends_and_stores_each_item_once():
    client = RecordingClient()
    session = OmSession(client, "t1", resource_id="u1")
    assert isinstance(session, Session)  # the SDK's (runtime-checkable) protocol

    assert await session.get_items() == [] and client.steps == []  # nothing added: no step
    await session.add_items([{"role": "user", "content": "hi"}])
    call = dumped(function_call("weather", "{}", call_id="c1"))
    await session.add_items([call, {"type": "function_call_output", "call_id": "c1", "output": "sun"}])
    assert client.turn_ends == []  # the tool loop goes on
    reply = dumped(assistant_message("sunny", item_id="msg_9"))
    await session.add_items([reply])
    assert client.turn_ends == ["msg_9"]
    await session.add_items([reply, call])  # the SDK saving again: nothing new is stored
    assert [m.id for m in client.sent][1:] == ["c1", "c1:output", "msg_9"] and client.turn_ends == ["msg_9"]

    items = await session.get_items()
    assert client.steps == ["msg_9"]  # one step, after the last message added
    assert [i.get("role") or i["type"] for i in items] == ["user", "function_call", "function_call_output",
                                                           "assistant"]
    assert await session.get_items(limit=2) == items[-2:] and client.steps == ["msg_9"]  # no new messages
    with pytest.raises(ImmutableHistory, match="append-only"):
        await session.pop_item()
    await session.clear_session()
    assert len(client.controls) == 1 and client.controls[0].thread_id == "t1"


async def test_a_run_that_stops_on_a_tool_call_leaves_the_turn_open():
    client = RecordingClient()
    session = OmSession(client, "t1")
    await session.add_items([{"role": "user", "content": "go"},
                             dumped(assistant_message("calling", item_id="m1")),
                             dumped(function_call("f", "{}", call_id="c1"))])
    await session.add_items([dumped(assistant_message("still waiting", item_id="m2"))])
    assert client.turn_ends == []  # c1 has no output yet
    await session.end_turn()
    assert client.turn_ends == ["m2"]


def test_without_the_sdk_the_import_names_the_extra(monkeypatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "agents", None)  # as if openai-agents were not installed
    monkeypatch.setitem(sys.modules, "agents.memory", None)
    monkeypatch.delitem(sys.modules, "omstream.integrations.openai_agents")
    with pytest.raises(ImportError, match=r"pip install 'omstream\[agents\]'"):
        importlib.import_module("omstream.integrations.openai_agents")
