"""Pydantic AI messages and chat messages (the OpenAI shape `ThreadMemory` stores and the window's
`chat` is), both ways; the pure half of `omstream.integrations.pydantic_ai`.

Stored (`chat_of`), one chat message per piece the model saw:

* a `ModelRequest`'s `UserPromptPart` -> a `user` message (text; images, documents and binary
  content as `image_url` / `file` parts); a `ToolReturnPart` -> a `tool` message with its
  `tool_call_id` and the text the model read (`model_response_str()`); a retry that answers a
  call -> that call's `tool` message, one that answers none -> a `user` message with the retry
  text;
* a `ModelResponse` -> one `assistant` message: its text, then a `tool_calls` entry per
  `ToolCallPart` (same id, name, JSON arguments);
* not stored: system prompts (the agent's own, sent again each run), thinking, native
  (provider-run) tool parts and Pydantic AI's bookkeeping parts (instruction and tool
  deltas, capabilities).

Given back (`messages_of`): the window's chat as `ModelRequest`s and `ModelResponse`s — system
messages as `SystemPromptPart`s, a `tool` message as the `ToolReturnPart` of the call with the
same id.  Every message built here is marked as the window's (`metadata["omstream"]`), and a
message once stored carries the ids of what it was stored as (`with_ids`), so no message is
stored twice and a window is never mistaken for the run's own messages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

try:
    from pydantic_ai.messages import (
        BinaryContent,
        CachePoint,
        DocumentUrl,
        FileUrl,
        ImageUrl,
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        RetryFeedbackPart,
        RetryPromptPart,
        SystemPromptPart,
        TextContent,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserContent,
        UserPromptPart,
    )
except ImportError as exc:  # pragma: no cover - the extra is installed wherever this is tested
    raise ImportError("omstream.integrations.pydantic_ai needs Pydantic AI: "
                      "pip install 'omstream[pydantic-ai]'") from exc

__all__ = ["MARK", "chat_of", "is_window", "messages_of", "stored_ids", "with_ids", "without_orphans"]

#: The key of `metadata` under which omstream marks the messages it built or stored.
MARK = "omstream"
_WINDOW = "window"

ChatMessage = dict[str, Any]


# --- marks --------------------------------------------------------------------------------------
def _mark(message: ModelMessage) -> Any:
    return (message.metadata or {}).get(MARK)


def is_window(message: ModelMessage) -> bool:
    """Whether `message` was built from a context window (and so is not the run's own)."""
    return bool(_mark(message) == _WINDOW)


def stored_ids(message: ModelMessage) -> list[str] | None:
    """The ids `message` was stored as, or None when it was not stored yet."""
    mark = _mark(message)
    return list(mark["ids"]) if isinstance(mark, Mapping) and "ids" in mark else None


def with_ids(message: ModelMessage, ids: Sequence[str]) -> ModelMessage:
    """A copy of `message` that records the ids it was stored as (Pydantic AI asks for new
    objects rather than changes to those in a run's history)."""
    return dataclasses.replace(message, metadata={**(message.metadata or {}), MARK: {"ids": list(ids)}})


# --- Pydantic AI -> chat --------------------------------------------------------------------------
def _content_part(item: UserContent) -> dict[str, Any] | None:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    if isinstance(item, TextContent):
        return {"type": "text", "text": item.content}
    if isinstance(item, ImageUrl):
        return {"type": "image_url", "image_url": {"url": item.url}}
    if isinstance(item, BinaryContent):
        if item.is_image:
            return {"type": "image_url", "image_url": {"url": item.data_uri}}
        return {"type": "file", "file": {"file_data": item.data_uri, "mime_type": item.media_type}}
    if isinstance(item, FileUrl):  # documents, audio, video: by their address
        return {"type": "file", "file": {"file_url": item.url, "mime_type": item.media_type}}
    if isinstance(item, CachePoint):
        return None  # a provider cache marker, not content
    return {"type": "text", "text": str(item)}


def _user_content(content: str | Sequence[UserContent]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts = [p for p in map(_content_part, content) if p is not None]
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _request_chat(part: ModelRequestPart) -> ChatMessage | None:
    if isinstance(part, UserPromptPart):
        return {"role": "user", "content": _user_content(part.content)}
    if isinstance(part, ToolReturnPart):
        return {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response_str()}
    if isinstance(part, RetryPromptPart | RetryFeedbackPart):
        call_id = getattr(part, "tool_call_id", None)
        if call_id and getattr(part, "tool_name", None):
            return {"role": "tool", "tool_call_id": call_id, "content": part.model_response()}
        return {"role": "user", "content": part.model_response()}
    return None  # system prompts and Pydantic AI's bookkeeping parts


def chat_of(message: ModelMessage) -> list[ChatMessage]:
    """`message` as the chat messages to store (see the module docstring); empty when it holds
    nothing the thread keeps."""
    if isinstance(message, ModelRequest):
        return [chat for chat in map(_request_chat, message.parts) if chat is not None]
    text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
    calls = [{"id": p.tool_call_id, "type": "function",
              "function": {"name": p.tool_name, "arguments": p.args_as_json_str()}}
             for p in message.parts if type(p) is ToolCallPart]  # native (provider-run) calls are not ours
    if not text and not calls:
        return []
    return [{"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}]


# --- chat -> Pydantic AI --------------------------------------------------------------------------
def _user_item(part: Any) -> UserContent:
    kind = part.get("type") if isinstance(part, Mapping) else None
    if kind == "image_url":
        image = part["image_url"]
        url = str(image.get("url") if isinstance(image, Mapping) else image)
        return BinaryContent.from_data_uri(url) if url.startswith("data:") else ImageUrl(url=url)
    if kind == "file":
        file = part.get("file") or {}
        data, address = file.get("file_data"), file.get("file_url")
        if isinstance(data, str) and data.startswith("data:"):
            return BinaryContent.from_data_uri(data)
        if address:
            return DocumentUrl(url=str(address))
        return f"[File: {file.get('filename') or 'attachment'}]"
    return str(part.get("text", "")) if isinstance(part, Mapping) else str(part)


def _user_prompt(content: Any) -> UserPromptPart:
    if content is None or isinstance(content, str):
        return UserPromptPart(content or "")
    return UserPromptPart([_user_item(p) for p in content])


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))


def messages_of(chat: Iterable[Mapping[str, Any]]) -> list[ModelMessage]:
    """Chat messages (a window's) as Pydantic AI messages, marked as the window's; consecutive
    system, user and tool messages share one `ModelRequest`."""
    out: list[ModelMessage] = []
    names: dict[str, str] = {}  # tool call id -> name: a chat tool message has no name
    parts: list[ModelRequestPart] = []
    metadata = {MARK: _WINDOW}

    def flush() -> None:
        if parts:
            out.append(ModelRequest(parts=list(parts), metadata=dict(metadata)))
            parts.clear()

    for message in chat:
        role = message.get("role")
        if role == "assistant":
            flush()
            reply: list[TextPart | ToolCallPart] = []
            if text := _text(message.get("content")):
                reply.append(TextPart(text))
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                names[str(call["id"])] = str(function.get("name"))
                reply.append(ToolCallPart(str(function.get("name")), function.get("arguments") or "{}",
                                          tool_call_id=str(call["id"])))
            out.append(ModelResponse(parts=reply, metadata=dict(metadata)))
        elif role == "system":
            parts.append(SystemPromptPart(_text(message.get("content"))))
        elif role == "tool":
            call_id = str(message.get("tool_call_id"))
            parts.append(ToolReturnPart(names.get(call_id, "unknown-tool"), _text(message.get("content")),
                                        tool_call_id=call_id))
        else:
            parts.append(_user_prompt(message.get("content")))
    flush()
    return out


def without_orphans(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """`messages` with each tool return whose call is not among them turned into a user note,
    as the window's chat does: a provider refuses a result without its call (the call was
    observed, its result not yet)."""
    calls = {p.tool_call_id for m in messages if isinstance(m, ModelResponse)
             for p in m.parts if isinstance(p, ToolCallPart)}
    out: list[ModelMessage] = []
    for message in messages:
        if isinstance(message, ModelRequest) and any(
                isinstance(p, ToolReturnPart) and p.tool_call_id not in calls for p in message.parts):
            parts: list[ModelRequestPart] = [
                UserPromptPart(f"[Tool {p.tool_name} (call {p.tool_call_id}, made earlier in this conversation) "
                               f"returned:] {p.model_response_str()}")
                if isinstance(p, ToolReturnPart) and p.tool_call_id not in calls else p
                for p in message.parts]
            message = dataclasses.replace(message, parts=parts)
        out.append(message)
    return out
