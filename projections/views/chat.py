"""Stored messages as a ready-to-send chat conversation (OpenAI shape, as litellm takes it).

The raw tail of the context window keeps its tool history.  A stored message becomes one or more
chat messages:

* text parts -> `content` (a string when the message holds only text);
* images and files -> content parts of a *user* message (`image_url`, `file`); assistant and
  system messages only take text on OpenAI, so there they become a `[Image: label]` /
  `[File: label]` note instead;
* tool calls -> an assistant message with `tool_calls` (its `content` is the message's text, or
  null); tool results -> one `{"role": "tool", "tool_call_id": ...}` message each, the result
  serialized as the token counter priced it (`modelOutput` first, 2-space JSON for non-strings,
  the error text or the denial reason when it failed or was denied), multimodal results as parts;
* reasoning and `data-*` parts -> nothing (the actor never reads them), and a message that is
  left with nothing is not sent.

An AI-SDK assistant message may hold a whole agent step: text, several calls and their results,
more text.  It is split so the result is a valid conversation: the assistant message carrying the
calls, then one tool message per result, then a new assistant message for the text after them.

Validity rules the builder keeps, whatever the stored history looks like:

* a tool message only ever directly follows the assistant message whose `tool_calls` hold its id
  (or another tool message answering that same assistant message);
* every tool call gets a tool message.  A call whose result is not in the window (still running,
  or never recorded) is answered with `NO_RESULT`, as litellm's own repair does;
* a result whose call is not in the window (the call was observed, the result is still raw) is
  sent as a *user* note naming the tool, the call id and the result: the call cannot be
  re-created, and a system message mid-conversation is moved or refused by several providers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omstream.engine.prompting.observer_attachments import attachment_of, content_part
from omstream.engine.rules.attachments import attachment_label, is_image_like_file
from omstream.engine.rules.tokens import (
    EMPTY_RESULT,
    TOOL_FAILED,
    block_attachment,
    denial_reason,
    format_tool_result,
    is_tool_error,
    multimodal_blocks,
    tool_result_value,
)
from omstream.schemas.messages import (
    FilePart,
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

__all__ = ["NO_RESULT", "ChatMessage", "chat_messages", "tool_result_content"]

#: One chat message, OpenAI / litellm shape.
ChatMessage = dict[str, Any]
#: The tool message answering a call whose result is not in the window.
NO_RESULT = "[no result was recorded for this tool call]"

# AI SDK tool outputs (`providerMetadata.mastra.modelOutput`): what the model saw is their value.
_TEXT_OUTPUTS = ("text", "error-text")
_JSON_OUTPUTS = ("json", "error-json")


# --- content parts ----------------------------------------------------------------------------
def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def attachment_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """An image or file (wire dict, camelCase) as an OpenAI content part; image-like files are
    sent as images, since OpenAI's `file` input takes documents only.  The Observer's request
    sends attachments the same way (`attachments.content_part`)."""
    return content_part(attachment_of(part))


def _attachment_note(part: Mapping[str, Any]) -> dict[str, Any]:
    kind = "Image" if part.get("type") == "image" or is_image_like_file(part) else "File"
    label = attachment_label(part)
    return _text(f"[{kind}: {label}]" if label else f"[{kind}]")


def _collapse(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text-only content as one string (what every provider takes); anything else as parts."""
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


# --- tool results -----------------------------------------------------------------------------
def _model_output(value: Any) -> Any:
    """Unwrap an AI SDK tool output (`{type: 'text' | 'json' | ..., value}`) to what it holds."""
    if isinstance(value, Mapping) and set(value) <= {"type", "value", "providerOptions"}:
        if value.get("type") in _TEXT_OUTPUTS and isinstance(value.get("value"), str):
            return value["value"]
        if value.get("type") in _JSON_OUTPUTS:
            return value.get("value")
    return value


def _block_part(block: Any) -> dict[str, Any]:
    attachment = block_attachment(block)
    if attachment is not None:
        return attachment_part(attachment)
    if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str):
        return _text(block["text"])
    return _text(format_tool_result(block))


def _result_body(part: ToolResultPart) -> str | list[dict[str, Any]]:
    value, typed = tool_result_value(part)
    value = value if typed else _model_output(value)
    blocks = value if typed else multimodal_blocks(value)
    # Blocks are sent one by one only when one of them is an attachment: that is what needs a
    # part of its own.  A text-only MCP-style `{content: [...]}` stays one JSON text, as counted.
    if blocks and (typed or any(block_attachment(b) is not None for b in blocks)):
        return _collapse([_block_part(b) for b in blocks])
    if value is None or value == "" or value == []:
        return EMPTY_RESULT
    return format_tool_result(value)


def tool_result_content(part: ToolResultPart) -> str | list[dict[str, Any]]:
    """A tool message's content: the denial reason, the error, or the result (never truncated:
    the actor sees what the token counter priced)."""
    if part.denied:
        return denial_reason(part)
    if is_tool_error(part):
        if part.error:
            return part.error
        body = _result_body(part)
        return TOOL_FAILED if body == EMPTY_RESULT else body
    return _result_body(part)


def _orphan_note(part: ToolResultPart) -> list[dict[str, Any]]:
    outcome = "was denied" if part.denied else "failed" if is_tool_error(part) else "returned"
    head = f"[Tool {part.tool_name} (call {part.tool_call_id}, made earlier in this conversation) {outcome}:]"
    body = tool_result_content(part)
    return [_text(head), *(body if isinstance(body, list) else [_text(body)])]


def _arguments(args: dict[str, Any] | str) -> str:
    """OpenAI's `arguments` is a JSON string; empty arguments are `{}` (providers parse them)."""
    if isinstance(args, str):
        return args if args.strip() else "{}"
    return json.dumps(args, ensure_ascii=False)


# --- the conversation -------------------------------------------------------------------------
def _speaker(role: str) -> str:
    return role if role in ("assistant", "system") else "user"


@dataclass
class _Conversation:
    """The chat being built.

    `draft` is the chat message the current stored message is filling; `pending` the calls of
    the last assistant message with `tool_calls` that have no tool message yet, while only tool
    messages follow it (the exchange is still open).
    """

    messages: list[ChatMessage] = field(default_factory=list)
    draft: ChatMessage | None = None
    pending: dict[str, str] = field(default_factory=dict)  # tool call id -> tool name
    exchange_open: bool = False

    def close_exchange(self) -> None:
        """Answer the calls still waiting, so no call is left without its tool message."""
        for call_id in self.pending:
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": NO_RESULT})
        self.pending.clear()
        self.exchange_open = False

    def _start(self, message: ChatMessage) -> ChatMessage:
        self.close_exchange()
        self.messages.append(message)
        self.draft = message
        return message

    def say(self, speaker: str, part: dict[str, Any]) -> None:
        """Add a content part, to the draft when the same speaker is filling it."""
        draft = self.draft
        if draft is None or draft["role"] != speaker:
            draft = self._start({"role": speaker, "content": []})
        draft["content"].append(part)

    def call(self, part: ToolCallPart) -> None:
        draft = self.draft
        if draft is None or draft["role"] != "assistant":
            draft = self._start({"role": "assistant", "content": []})
        calls = draft.setdefault("tool_calls", [])
        if any(c["id"] == part.tool_call_id for c in calls):
            return  # the same call stored twice: one call, or providers see a duplicate id
        calls.append({
            "id": part.tool_call_id, "type": "function",
            "function": {"name": part.tool_name, "arguments": _arguments(part.args)},
        })
        self.pending[part.tool_call_id] = part.tool_name
        self.exchange_open = True

    def result(self, part: ToolResultPart) -> None:
        if self.exchange_open and part.tool_call_id in self.pending:
            del self.pending[part.tool_call_id]
            self.messages.append({"role": "tool", "tool_call_id": part.tool_call_id,
                                  "content": tool_result_content(part)})
        else:
            self._start({"role": "user", "content": _orphan_note(part)})
        self.draft = None  # text after a result is a new assistant message

    def add(self, message: Message) -> None:
        speaker = _speaker(message.role)
        content = [TextPart(text=message.content)] if isinstance(message.content, str) else message.content
        for part in content:
            if isinstance(part, TextPart):
                if part.text:
                    self.say(speaker, _text(part.text))
            elif isinstance(part, ImagePart | FilePart):
                wire = part.model_dump(by_alias=True, exclude_none=True)
                self.say(speaker, attachment_part(wire) if speaker == "user" else _attachment_note(wire))
            elif isinstance(part, ToolCallPart):
                self.call(part)
            elif isinstance(part, ToolResultPart):
                self.result(part)
            # reasoning and data-* parts are not conversation: dropped
        self.draft = None  # the next stored message starts its own chat message


def _finish(message: ChatMessage) -> ChatMessage:
    if message["role"] == "tool":
        return message
    parts = message["content"]
    content = _collapse(parts) if parts else None  # only an assistant with tool calls has none
    return {**message, "content": content}


def chat_messages(messages: Iterable[Message]) -> list[ChatMessage]:
    """`messages` (in time order) as a valid OpenAI conversation; see the module docstring."""
    conversation = _Conversation()
    for message in messages:
        conversation.add(message)
    conversation.close_exchange()
    return [_finish(m) for m in conversation.messages]
