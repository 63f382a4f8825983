"""The window's `chat` is a valid OpenAI conversation that keeps the agent's tool history.

Every conversation built here goes through litellm's own checks:

* `litellm.utils.validate_and_fix_openai_messages`, what `litellm.completion` runs on its input
  (it refuses unknown content-part types in user messages);
* litellm's message TypedDicts (`litellm.types.llms.openai`), validated strictly with pydantic and
  no unknown keys: the shape of every role, tool call, image and file part;
* `sanitize_messages_for_tool_calling` with `litellm.modify_params` on, litellm's repair of
  orphaned tool calls, orphaned tool results, duplicate results and empty text: a valid
  conversation comes out unchanged;
* and, since none of these fails on a misplaced `tool_call_id`, an explicit pairing check.
"""

from __future__ import annotations

import copy
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ConfigDict, TypeAdapter, with_config

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import
import litellm  # noqa: E402
from litellm.litellm_core_utils.prompt_templates.factory import sanitize_messages_for_tool_calling  # noqa: E402
from litellm.types.llms import openai as litellm_types  # noqa: E402
from litellm.utils import validate_and_fix_openai_messages  # noqa: E402

from omstream.projections.views.chat import NO_RESULT, chat_messages  # noqa: E402
from omstream.projections.views.context import CONTINUATION, ThreadView, context_messages  # noqa: E402
from omstream.schemas.messages import Message  # noqa: E402

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoK"


# --- litellm's checks -------------------------------------------------------------------------
def _strict(typed_dict: type) -> TypeAdapter:
    """litellm's TypedDict for one role, with unknown keys refused."""
    @with_config(ConfigDict(extra="forbid"))
    class Strict(typed_dict, total=False):  # type: ignore[misc, valid-type]
        pass
    return TypeAdapter(Strict)


SHAPES = {
    "system": _strict(litellm_types.ChatCompletionSystemMessage),
    "user": _strict(litellm_types.ChatCompletionUserMessage),
    "assistant": _strict(litellm_types.ChatCompletionAssistantMessage),
    "tool": _strict(litellm_types.ChatCompletionToolMessage),
}


def assert_shapes(chat: list[dict[str, Any]]) -> None:
    for index, message in enumerate(chat):
        validated = SHAPES[message["role"]].validate_python(copy.deepcopy(message), strict=True)
        content = validated.get("content")
        if content is not None and not isinstance(content, str):
            list(content)  # pydantic checks `Iterable` content lazily: drain it
        assert message.get("content") or message.get("tool_calls"), f"message {index} is empty"


def assert_tool_calls_paired(chat: list[dict[str, Any]]) -> None:
    """Every tool message answers a call of the assistant message right before its tool block,
    and every call is answered exactly once in that block."""
    waiting: list[str] | None = None  # the calls of the open exchange not answered yet
    for index, message in enumerate(chat):
        if message["role"] == "tool":
            assert waiting is not None and message["tool_call_id"] in waiting, (
                f"tool message {index} ({message['tool_call_id']}) does not answer the assistant before it")
            waiting.remove(message["tool_call_id"])
            continue
        assert not waiting, f"calls {waiting} have no tool message before message {index}"
        calls = message.get("tool_calls") or []
        waiting = [call["id"] for call in calls] if calls else None
        assert waiting is None or len(set(waiting)) == len(waiting), "duplicate tool call ids"
    assert not waiting, f"calls {waiting} have no tool message"


def assert_valid_conversation(chat: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch | None = None) -> None:
    validate_and_fix_openai_messages(copy.deepcopy(chat))
    assert_shapes(chat)
    assert_tool_calls_paired(chat)
    previous = litellm.modify_params
    litellm.modify_params = True  # the repair only runs with it on
    try:
        assert sanitize_messages_for_tool_calling(copy.deepcopy(chat)) == chat, "litellm had to repair it"
    finally:
        litellm.modify_params = previous


# --- builders ---------------------------------------------------------------------------------
def msg(i: int, role: str, content: Any) -> Message:
    return Message(id=f"m{i}", thread_id="t1", resource_id="u1", role=role, content=content,
                   created_at=T0 + timedelta(minutes=i))


def call(call_id: str, name: str = "search", args: Any = None) -> dict[str, Any]:
    return {"type": "tool-call", "toolCallId": call_id, "toolName": name, "args": {"q": "lyon"} if args is None else args}


def result(call_id: str, name: str = "search", **fields: Any) -> dict[str, Any]:
    return {"type": "tool-result", "toolCallId": call_id, "toolName": name, **fields}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_call(call_id: str, name: str = "search", arguments: str = '{"q": "lyon"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- tool history -----------------------------------------------------------------------------
def test_an_agent_step_in_one_message_is_split_into_calls_results_and_text():
    step = msg(1, "assistant", [
        {"type": "reasoning", "text": "I should look it up"},
        text("Let me check."),
        call("c1", args={"q": "lyon", "n": 2}), call("c2", "weather", args={"city": "Lyon"}),
        result("c1", result={"hits": ["Lyon"]}),
        result("c2", "weather", result="sunny"),
        text("Lyon is sunny."),
        {"type": "data-om-status", "data": {"x": 1}},
    ])
    chat = chat_messages([msg(0, "user", "weather in lyon?"), step])
    assert chat == [
        {"role": "user", "content": "weather in lyon?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            tool_call("c1", arguments='{"q": "lyon", "n": 2}'),
            tool_call("c2", "weather", '{"city": "Lyon"}')]},
        {"role": "tool", "tool_call_id": "c1", "content": '{\n  "hits": [\n    "Lyon"\n  ]\n}'},
        {"role": "tool", "tool_call_id": "c2", "content": "sunny"},
        {"role": "assistant", "content": "Lyon is sunny."},
    ]
    assert_valid_conversation(chat)


def test_a_call_without_text_has_null_content_and_results_may_come_in_a_tool_message():
    chat = chat_messages([
        msg(0, "assistant", [call("c1", args="")]),
        msg(1, "tool", [result("c1", result="done")]),
        msg(2, "assistant", [call("c2"), result("c2", result=None)]),
        msg(3, "assistant", [call("c3"), text("calling…"), result("c3", result=[])]),
    ])
    assert chat == [
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1", arguments="{}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c2")]},
        {"role": "tool", "tool_call_id": "c2", "content": "[empty result]"},
        {"role": "assistant", "content": "calling…", "tool_calls": [tool_call("c3")]},
        {"role": "tool", "tool_call_id": "c3", "content": "[empty result]"},
    ]
    assert_valid_conversation(chat)


def test_errors_denials_and_model_output():
    chat = chat_messages([msg(0, "assistant", [
        call("c1"), call("c2"), call("c3"), call("c4"), call("c5"),
        result("c1", isError=True, error="HTTP 500"),
        result("c2", isError=True),
        result("c3", denied=True),
        result("c4", result={"raw": "x" * 50},
               providerMetadata={"mastra": {"modelOutput": {"type": "text", "value": "short"}}}),
        result("c5", result=1, providerMetadata={"mastra": {"modelOutput": {"type": "json", "value": {"a": 1}}}}),
    ])])
    tools = {m["tool_call_id"]: m["content"] for m in chat if m["role"] == "tool"}
    assert tools == {"c1": "HTTP 500", "c2": "Tool execution failed",
                     "c3": "Tool call was not approved by the user", "c4": "short", "c5": '{\n  "a": 1\n}'}
    assert_valid_conversation(chat)


def test_a_result_whose_call_was_observed_becomes_a_user_note():
    """The call's message is covered by an observation, its result is still raw: there is no
    assistant message to attach a tool message to, so the result is told as a user note."""
    observed, raw = msg(0, "assistant", [call("c1")]), msg(1, "tool", [result("c1", result={"hits": 3})])
    view = ThreadView("t1", observations="Date: Mar 3, 2025\n* 🔴 (09:00) Agent searched for lyon",
                      observed={observed.id}, clock=T0 + timedelta(minutes=2))
    view.messages = {m.id: m for m in (observed, raw, msg(2, "assistant", "3 hits."))}
    chat = context_messages(view)
    assert chat[-3:] == [
        {"role": "user", "content": CONTINUATION},
        {"role": "user", "content":
            '[Tool search (call c1, made earlier in this conversation) returned:]\n{\n  "hits": 3\n}'},
        {"role": "assistant", "content": "3 hits."},
    ]
    assert_valid_conversation(chat)


def test_a_call_without_its_result_in_the_window_is_answered_so_the_conversation_stays_valid():
    chat = chat_messages([
        msg(0, "assistant", [call("c1")]),
        msg(1, "user", "never mind"),          # the exchange is closed before c1's result
        msg(2, "tool", [result("c1", result="late")]),
        msg(3, "assistant", [call("c2", "shot", {})]),  # still running
    ])
    assert chat == [
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": NO_RESULT},
        {"role": "user", "content": "never mind"},
        {"role": "user", "content": "[Tool search (call c1, made earlier in this conversation) returned:]\nlate"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c2", "shot", "{}")]},
        {"role": "tool", "tool_call_id": "c2", "content": NO_RESULT},
    ]
    assert_valid_conversation(chat)


# --- images and files -------------------------------------------------------------------------
def test_user_images_and_files_are_content_parts():
    chat = chat_messages([msg(0, "user", [
        text("what is in these?"),
        {"type": "image", "image": PNG, "detail": "low"},
        {"type": "image", "image": "https://x.test/cat.jpg", "providerOptions": {"openai": {"imageDetail": "high"}}},
        {"type": "image", "image": f"data:image/png;base64,{PNG}"},
        {"type": "file", "data": PDF, "mimeType": "application/pdf", "filename": "a.pdf"},
        {"type": "file", "url": "https://x.test/report.pdf", "mimeType": "application/pdf"},
        {"type": "file", "data": PNG, "mimeType": "image/png", "filename": "shot.png"},
    ])])
    assert chat == [{"role": "user", "content": [
        text("what is in these?"),
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://x.test/cat.jpg", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "a.pdf"}},
        {"type": "file", "file": {"file_id": "https://x.test/report.pdf", "format": "application/pdf"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]}]
    assert_valid_conversation(chat)


def test_assistant_attachments_become_notes_since_openai_takes_only_text_there():
    chat = chat_messages([msg(0, "assistant", [
        text("here it is"), {"type": "image", "image": "https://x.test/out.png"},
        {"type": "file", "url": "https://x.test/r.pdf", "mimeType": "application/pdf", "filename": "r.pdf"},
    ])])
    assert chat == [{"role": "assistant", "content": "here it is\n[Image: out.png]\n[File: r.pdf]"}]
    assert_valid_conversation(chat)


def test_multimodal_tool_results_are_parts_of_the_tool_message():
    chat = chat_messages([msg(0, "assistant", [
        call("c1", "screenshot"), call("c2", "screenshot"), call("c3", "read"),
        result("c1", "screenshot", content=[text("the page"), {"type": "image", "image": PNG, "mimeType": "image/png"}]),
        result("c2", "screenshot", providerMetadata={"mastra": {"modelOutput": {"type": "content", "value": [
            {"type": "text", "text": "page 2"}, {"type": "media", "data": PNG, "mediaType": "image/png"}]}}}),
        result("c3", "read", content=[text("only text")]),
    ])])
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    assert chat[1:] == [
        {"role": "tool", "tool_call_id": "c1", "content": [text("the page"), image]},
        {"role": "tool", "tool_call_id": "c2", "content": [text("page 2"), image]},
        {"role": "tool", "tool_call_id": "c3", "content": "only text"},
    ]
    assert_valid_conversation(chat)


def test_reasoning_and_data_parts_are_dropped_and_empty_messages_not_sent():
    chat = chat_messages([
        msg(0, "user", "hi"),
        msg(1, "assistant", [{"type": "reasoning", "text": "think"}, {"type": "data-om-activation", "data": {}}]),
        msg(2, "assistant", [text("")]),
        msg(3, "assistant", "hello"),
    ])
    assert chat == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert_valid_conversation(chat)


# --- any history ------------------------------------------------------------------------------
_IDS = ["c1", "c2", "c3"]
_PART = st.one_of(
    st.builds(text, st.sampled_from(["", "ok", "more"])),
    st.builds(lambda i: {"type": "reasoning", "text": "r"}, st.none()),
    st.builds(lambda: {"type": "data-x", "data": 1}),
    st.builds(lambda i: call(i), st.sampled_from(_IDS)),
    st.builds(lambda i: result(i, result="r"), st.sampled_from(_IDS)),
    st.builds(lambda i: result(i, isError=True), st.sampled_from(_IDS)),
    st.builds(lambda i: result(i, content=[{"type": "image", "image": PNG}]), st.sampled_from(_IDS)),
    st.builds(lambda: {"type": "image", "image": "https://x.test/a.png"}),
    st.builds(lambda: {"type": "file", "data": PDF, "mimeType": "application/pdf"}),
)
_MESSAGE = st.tuples(st.sampled_from(["user", "assistant", "tool", "system"]),
                     st.one_of(st.sampled_from(["", "plain"]), st.lists(_PART, max_size=6)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_MESSAGE, max_size=8))
def test_any_stored_history_renders_as_a_valid_conversation(history):
    chat = chat_messages([msg(i, role, content) for i, (role, content) in enumerate(history)])
    assert_valid_conversation(chat)
