"""Pydantic AI messages to chat messages and back (omstream.integrations.pydantic_ai_messages):
what is stored of a run, and how a window's chat is given back, tool calls and returns included."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai.messages import (  # noqa: E402
    ImageUrl,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from omstream.client.chat_records import ToolNames, message_from_chat  # noqa: E402
from omstream.integrations.pydantic_ai_messages import (  # noqa: E402
    chat_of,
    is_window,
    messages_of,
    stored_ids,
    with_ids,
    without_orphans,
)
from omstream.projections.views.chat import chat_messages  # noqa: E402

RUN = [
    ModelRequest(parts=[SystemPromptPart("You are terse."), UserPromptPart("Weather in Lyon?")], run_id="r"),
    ModelResponse(parts=[ThinkingPart("hmm"), TextPart("Checking."),
                         ToolCallPart("weather", {"city": "Lyon"}, tool_call_id="c1")], run_id="r"),
    ModelRequest(parts=[ToolReturnPart("weather", {"sky": "clear"}, tool_call_id="c1")], run_id="r"),
    ModelResponse(parts=[TextPart("Clear skies.")], run_id="r"),
]


def test_a_run_is_stored_as_chat_without_system_prompts_or_thinking():
    chat = [c for m in RUN for c in chat_of(m)]
    assert chat == [
        {"role": "user", "content": "Weather in Lyon?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Lyon"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"sky":"clear"}'},
        {"role": "assistant", "content": "Clear skies."},
    ]


def test_images_are_stored_as_image_parts():
    request = ModelRequest(parts=[UserPromptPart(["Look:", ImageUrl(url="https://example.com/a.png")])])
    assert chat_of(request) == [{"role": "user", "content": [
        {"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]


def test_the_run_round_trips_through_stored_messages_and_the_window_chat():
    # chat -> stored messages (what ThreadMemory.add sends) -> the window's chat -> Pydantic AI
    names, now = ToolNames(), datetime(2026, 1, 1, tzinfo=UTC)
    stored = [message_from_chat(c, id=f"m{i}", thread_id="t", resource_id=None, created_at=now, names=names)
              for i, c in enumerate(c for m in RUN for c in chat_of(m))]
    back = messages_of(chat_messages(stored))
    assert all(is_window(m) for m in back)
    assert [type(m).__name__ for m in back] == ["ModelRequest", "ModelResponse", "ModelRequest", "ModelResponse"]
    assert back[0].parts == [UserPromptPart("Weather in Lyon?", timestamp=back[0].parts[0].timestamp)]
    text, call = back[1].parts
    assert isinstance(text, TextPart) and text.content == "Checking."
    assert isinstance(call, ToolCallPart) and (call.tool_name, call.tool_call_id) == ("weather", "c1")
    assert call.args_as_dict() == {"city": "Lyon"}
    (result,) = back[2].parts
    assert isinstance(result, ToolReturnPart) and (result.tool_name, result.tool_call_id) == ("weather", "c1")
    assert result.model_response_str() == '{"sky":"clear"}'  # the text the model read, as stored
    assert [p.content for p in back[3].parts] == ["Clear skies."]
    # ... and stores again as the same chat
    assert [c for m in back for c in chat_of(m)][1]["tool_calls"][0]["id"] == "c1"


def test_system_messages_of_the_window_are_system_prompts():
    back = messages_of([{"role": "system", "content": "<observations>x</observations>"},
                        {"role": "user", "content": "hi"}])
    assert len(back) == 1 and isinstance(back[0].parts[0], SystemPromptPart)
    assert back[0].parts[0].content == "<observations>x</observations>"


def test_a_stored_message_carries_its_ids_and_keeps_its_run():
    marked = with_ids(RUN[1], ["a-1"])
    assert stored_ids(marked) == ["a-1"] and stored_ids(RUN[1]) is None
    assert marked.run_id == "r" and marked.parts == RUN[1].parts and not is_window(marked)


def test_a_return_whose_call_was_observed_becomes_a_user_note():
    (note,) = without_orphans([RUN[2]])[0].parts
    assert isinstance(note, UserPromptPart) and "Tool weather (call c1" in str(note.content)
    assert without_orphans(RUN[1:3])[1] is RUN[2]
