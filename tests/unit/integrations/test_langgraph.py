"""omstream.integrations.langgraph_messages: LangChain messages as the chat dicts ThreadMemory
stores, and the window's chat back as LangChain messages, without a broker."""

from __future__ import annotations

import importlib
import json
import sys
from datetime import UTC, datetime

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from omstream.client.chat_records import InvalidChatMessage, ToolNames, message_from_chat
from omstream.integrations.langgraph_messages import (
    chat_from_langchain,
    chats_from_langchain,
    langchain_from_chat,
    langchain_from_chats,
)
from omstream.projections.views.chat import chat_messages

CALL = {"name": "weather", "args": {"city": "Valence", "days": 2}, "id": "call-1", "type": "tool_call"}
CONVERSATION = [
    SystemMessage(content="Be brief.", id="s1"),
    HumanMessage(content="Weather in Valence?", id="h1"),
    AIMessage(content="", tool_calls=[CALL], id="a1"),
    ToolMessage(content='{"sky": "clear"}', tool_call_id="call-1", name="weather", id="t1"),
    AIMessage(content="Clear skies for two days.", id="a2"),
]


def test_each_role_becomes_its_chat_message_with_the_langchain_id():
    chats = chats_from_langchain(CONVERSATION)
    assert chats == [
        {"role": "system", "content": "Be brief.", "id": "s1"},
        {"role": "user", "content": "Weather in Valence?", "id": "h1"},
        {"role": "assistant", "content": None, "id": "a1", "tool_calls": [
            {"id": "call-1", "type": "function",
             "function": {"name": "weather", "arguments": json.dumps({"city": "Valence", "days": 2})}}]},
        {"role": "tool", "content": '{"sky": "clear"}', "tool_call_id": "call-1", "id": "t1"},
        {"role": "assistant", "content": "Clear skies for two days.", "id": "a2"},
    ]


def test_the_round_trip_through_chat_keeps_roles_text_and_tool_calls():
    back = langchain_from_chats(chats_from_langchain(CONVERSATION))
    assert [type(m) for m in back] == [type(m) for m in CONVERSATION]
    assert [m.content for m in back] == [m.content for m in CONVERSATION]
    assert [m.id for m in back] == [m.id for m in CONVERSATION]
    assert back[2].tool_calls == [CALL]
    assert back[3].tool_call_id == "call-1"


def test_the_round_trip_through_stored_messages_and_the_windows_chat():
    """What the hook stores (ThreadMemory's chat -> Message) and what the model then reads (the
    window's chat builder -> LangChain) hold the same conversation, the tool call answered."""
    names = ToolNames()
    stored = [message_from_chat(chat, id=chat["id"], thread_id="t", resource_id="u",
                                created_at=datetime(2026, 1, 1, 9, i, tzinfo=UTC), names=names)
              for i, chat in enumerate(chats_from_langchain(CONVERSATION))]
    assert stored[3].content[0].tool_name == "weather"  # the result is named after its call
    back = langchain_from_chats(chat_messages(stored))
    assert [type(m) for m in back] == [type(m) for m in CONVERSATION]
    assert back[2].tool_calls == [CALL] and back[3].tool_call_id == "call-1"
    assert back[3].content == '{"sky": "clear"}'
    assert [m.text for m in back] == [m.text for m in CONVERSATION]


def test_text_blocks_become_one_string_and_reasoning_is_not_stored():
    ai = AIMessage(content=[{"type": "reasoning", "reasoning": "hmm"}, {"type": "text", "text": "Yes"},
                            {"type": "text", "text": ", sure."}], id="a")
    assert chat_from_langchain(ai) == {"role": "assistant", "content": "Yes, sure.", "id": "a"}


def test_images_are_kept_as_openai_parts():
    human = HumanMessage(content=[
        {"type": "text", "text": "What is this?"},
        {"type": "image", "url": "https://example.org/a.png"},
        {"type": "image", "base64": "AAAA", "mime_type": "image/png"},
        {"type": "image_url", "image_url": {"url": "https://example.org/b.png"}},
    ])
    chat = chat_from_langchain(human)
    assert "id" not in chat  # no id: ThreadMemory gives one
    assert chat["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "image_url", "image_url": {"url": "https://example.org/b.png"}},
    ]
    assert langchain_from_chat(chat).content == chat["content"]


def test_what_cannot_be_stored_is_refused_not_dropped():
    with pytest.raises(InvalidChatMessage, match="audio"):
        chat_from_langchain(HumanMessage(content=[{"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"}]))
    with pytest.raises(InvalidChatMessage, match="no id"):
        chat_from_langchain(AIMessage(content="", tool_calls=[{**CALL, "id": None}]))
    with pytest.raises(InvalidChatMessage, match="role"):
        langchain_from_chat({"role": "developer", "content": "x"})


def test_arguments_that_are_not_a_json_object_are_kept_whole():
    chat = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "not json"}}]}
    assert langchain_from_chat(chat).tool_calls[0]["args"] == {"_raw": "not json"}


@pytest.mark.parametrize("module", ["langgraph", "langgraph_messages"])
def test_without_langchain_the_import_names_the_extra(monkeypatch, module):
    for name in [n for n in sys.modules if n.startswith("omstream.integrations.langgraph")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "langchain_core.messages", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'omstream\[langgraph\]'"):
        importlib.import_module(f"omstream.integrations.{module}")
