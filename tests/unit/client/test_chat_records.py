"""Chat messages back into stored messages: what the window's `chat` shows comes back as it was."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.client.chat_records import UNKNOWN_TOOL, InvalidChatMessage, ToolNames, message_from_chat
from omstream.projections.views.chat import chat_messages
from omstream.schemas.messages import ImagePart, ToolCallPart, ToolResultPart

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def stored(chat: list[dict]) -> list:
    names = ToolNames()
    return [message_from_chat(c, id=f"m{i}", thread_id="t", resource_id="u", created_at=T0 + timedelta(seconds=i),
                              names=names) for i, c in enumerate(chat)]


def test_a_tool_exchange_comes_back_as_the_same_chat():
    chat = [{"role": "user", "content": "What's the weather in Lyon?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Lyon"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
            {"role": "assistant", "content": "It is sunny."}]
    messages = stored(chat)
    assert isinstance(messages[1].content[0], ToolCallPart) and messages[1].content[0].args == {"city": "Lyon"}
    result = messages[2].content[0]
    assert isinstance(result, ToolResultPart) and result.tool_name == "weather" and messages[2].role == "tool"
    assert chat_messages(messages) == chat


def test_a_result_of_an_unseen_call_is_stored_under_a_placeholder_name_and_images_stay_images():
    [result] = stored([{"role": "tool", "tool_call_id": "c9", "content": [{"type": "text", "text": "ok"}]}])
    assert result.content[0].tool_name == UNKNOWN_TOOL and result.content[0].result == "ok"
    [user] = stored([{"role": "user", "content": [{"type": "text", "text": "this"},
                                                  {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}])
    assert isinstance(user.content[1], ImagePart) and user.content[1].image == "https://x/y.png"


@pytest.mark.parametrize("chat, reason", [
    ({"role": "robot", "content": "beep"}, "role"),
    ({"role": "tool", "content": "ok"}, "tool_call_id"),
    ({"role": "assistant", "tool_calls": [{"id": "c1", "function": {}}]}, "function name"),
    ({"role": "user", "content": [{"type": "input_audio"}]}, "input_audio"),
    ({"role": "user", "content": 42}, "text or a list"),
])
def test_what_cannot_be_stored_is_refused_with_its_reason(chat, reason):
    with pytest.raises(InvalidChatMessage, match=reason):
        stored([chat])


words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=30)


@settings(max_examples=50)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "call"]), words), min_size=1, max_size=8))
def test_any_text_and_tool_conversation_round_trips(turns):
    chat: list[dict] = []
    for n, (kind, text) in enumerate(turns):
        if kind == "call":
            chat.append({"role": "assistant", "content": text, "tool_calls": [
                {"id": f"c{n}", "type": "function", "function": {"name": "look", "arguments": '{"q": 1}'}}]})
            chat.append({"role": "tool", "tool_call_id": f"c{n}", "content": text})
        else:
            chat.append({"role": kind, "content": text})
    assert chat_messages(stored(chat)) == chat
