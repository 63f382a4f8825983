"""Chat messages (the OpenAI / litellm shape every framework can produce) as stored messages.

The read side gives the agent its window as chat messages (`projections/views/chat.py`); this is
the way back, so an adapter that holds a framework's history as chat messages can store it:

* `user` / `system` -> a message of that role; text content stays text, `image_url` parts become
  image parts, `file` parts file parts;
* `assistant` -> text (if any) then one tool-call part per entry of `tool_calls`;
* `tool` -> a `tool` message holding one tool-result part, named after the call it answers
  (`ToolNames` remembers the calls seen, since a chat tool message does not carry the name).

A chat message this cannot read raises `InvalidChatMessage` naming what is wrong: an adapter
would otherwise store a message the model never saw.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from omstream.schemas.errors import OmError
from omstream.schemas.messages import FilePart, ImagePart, Message, MessagePart, TextPart, ToolCallPart, ToolResultPart

__all__ = ["UNKNOWN_TOOL", "InvalidChatMessage", "ToolNames", "message_from_chat"]

#: The tool name of a result whose call this client never saw (the schema requires a name).
UNKNOWN_TOOL = "unknown-tool"


class InvalidChatMessage(OmError, ValueError):
    """A chat message that cannot be stored as it stands."""


class ToolNames(dict[str, str]):
    """Tool call id -> tool name, for the calls seen so far (a chat `tool` message has no name)."""

    def learn(self, chat: Mapping[str, Any]) -> None:
        for call in chat.get("tool_calls") or ():
            self[str(call.get("id"))] = str((call.get("function") or {}).get("name") or UNKNOWN_TOOL)


def _arguments(raw: Any) -> dict[str, Any] | str:
    """A call's arguments: the JSON object they spell, else the text as the model wrote it."""
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw or "{}")
    except (TypeError, json.JSONDecodeError):
        return str(raw)
    return parsed if isinstance(parsed, dict) else str(raw)


def _content_part(part: Any) -> MessagePart:
    if isinstance(part, str):
        return TextPart(text=part)
    kind = part.get("type") if isinstance(part, Mapping) else None
    if kind == "text":
        return TextPart(text=str(part.get("text") or ""))
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        return ImagePart(image=str(url))
    if kind == "file":
        file = part.get("file") or {}
        return FilePart(data=file.get("file_data"), url=file.get("file_url"), filename=file.get("filename"),
                        mime_type=file.get("mime_type") or "application/octet-stream")
    raise InvalidChatMessage(f"a chat content part of type {kind!r} cannot be stored (text, image_url, file)")


def _content(value: Any) -> str | list[MessagePart]:
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list):
        return [_content_part(part) for part in value]
    raise InvalidChatMessage(f"chat content must be text or a list of parts, not {type(value).__name__}")


def _text(value: Any) -> str:
    """A tool message's content as the text the model read."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list):
        return "".join(p.get("text", "") if isinstance(p, Mapping) else str(p) for p in value)
    return json.dumps(value, ensure_ascii=False)


def _parts(chat: Mapping[str, Any], names: ToolNames) -> str | list[MessagePart]:
    role = chat.get("role")
    if role in ("user", "system"):
        return _content(chat.get("content"))
    if role == "assistant":
        content = _content(chat.get("content"))
        calls = chat.get("tool_calls") or []
        if not calls:
            return content
        parts: list[MessagePart] = [TextPart(text=content)] if isinstance(content, str) and content else (
            list(content) if isinstance(content, list) else [])
        for call in calls:
            function = call.get("function") or {}
            if not call.get("id") or not function.get("name"):
                raise InvalidChatMessage("an assistant tool call needs an id and a function name")
            parts.append(ToolCallPart(tool_call_id=str(call["id"]), tool_name=str(function["name"]),
                                      args=_arguments(function.get("arguments"))))
        return parts
    if role == "tool":
        call_id = chat.get("tool_call_id")
        if not call_id:
            raise InvalidChatMessage("a tool message needs the tool_call_id of the call it answers")
        return [ToolResultPart(tool_call_id=str(call_id), tool_name=names.get(str(call_id), UNKNOWN_TOOL),
                               result=_text(chat.get("content")))]
    raise InvalidChatMessage(f"a chat message's role must be user, assistant, system or tool, not {role!r}")


def message_from_chat(chat: Mapping[str, Any], *, id: str, thread_id: str, resource_id: str | None,
                      created_at: datetime, names: ToolNames | None = None) -> Message:
    """One chat message as a stored message of `thread_id`; `names` learns its tool calls and
    names its tool results."""
    names = ToolNames() if names is None else names
    content = _parts(chat, names)
    names.learn(chat)
    return Message(id=id, thread_id=thread_id, resource_id=resource_id, role=chat["role"],
                   content=content, created_at=created_at)
