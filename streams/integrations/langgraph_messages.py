"""LangChain messages and chat messages (the OpenAI shape `ThreadMemory` stores and the window's
`chat` holds), both ways: the pure half of `omstream.integrations.langgraph`.

* `chat_from_langchain`: a `HumanMessage` / `SystemMessage` / `AIMessage` / `ToolMessage` as the
  chat dict `ThreadMemory.add` takes, its `id` the LangChain message's id (the graph's
  `add_messages` reducer gives every message of the state one), so each is stored once however
  often the graph's history is handed over.  An `AIMessage`'s `tool_calls` become OpenAI tool
  calls (arguments as JSON text), a `ToolMessage` answers its call by `tool_call_id`.
* `langchain_from_chat`: a chat message of the window as the LangChain message the model reads.

Content is kept as LangChain holds it when it is text or OpenAI-style parts (text, `image_url`,
`file`); LangChain's own content blocks (`image` / `file` blocks with a URL or base64 data) are
turned into those parts first.  A part neither side can store raises `InvalidChatMessage` (from
`omstream.client.chat_records`) rather than being dropped: the model saw it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

try:
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolCall,
        ToolMessage,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError("omstream.integrations.langgraph_messages needs LangChain: "
                      "pip install 'omstream[langgraph]'") from exc

from omstream.client.chat_records import InvalidChatMessage

__all__ = ["chat_from_langchain", "chats_from_langchain", "langchain_from_chat", "langchain_from_chats"]

_ROLES = {"human": "user", "system": "system", "ai": "assistant", "tool": "tool"}
# Parts that carry nothing the model reads back (reasoning is not conversation: the window
# drops it too, projections/views/chat.py).
_SKIPPED = ("reasoning", "thinking", "tool_call", "tool_use", "tool_call_chunk", "server_tool_call",
            "server_tool_result")


def _data_url(block: Mapping[str, Any]) -> str | None:
    """A LangChain `image` / `file` block's URL, or its base64 data as a data URL."""
    url = block.get("url")
    if url:
        return str(url)
    data = block.get("base64") or (block.get("data") if block.get("source_type") == "base64" else None)
    if data:
        return f"data:{block.get('mime_type') or 'application/octet-stream'};base64,{data}"
    if block.get("source_type") == "url" and block.get("data"):
        return str(block["data"])
    return None


def _part(part: Any) -> dict[str, Any] | None:
    """One LangChain content part as an OpenAI chat part (None: nothing to keep)."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, Mapping):
        raise InvalidChatMessage(f"a LangChain content part must be text or a dict, not {type(part).__name__}")
    kind = part.get("type")
    if kind in ("text", "image_url", "file") and not (kind == "file" and "file" not in part):
        return {k: v for k, v in part.items() if k in ("type", "text", "image_url", "file")}
    if kind == "image" and (url := _data_url(part)):
        return {"type": "image_url", "image_url": {"url": url}}
    if kind == "file" and (url := _data_url(part)):
        key = "file_data" if url.startswith("data:") else "file_url"
        return {"type": "file", "file": {key: url, "filename": part.get("filename"),
                                         "mime_type": part.get("mime_type")}}
    if kind in _SKIPPED:
        return None
    raise InvalidChatMessage(f"a LangChain content part of type {kind!r} cannot be stored "
                             "(text, image_url, file, image or file blocks with a URL or base64 data)")


def _content(content: str | list[Any]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts = [p for p in map(_part, content) if p is not None]
    if all(p["type"] == "text" for p in parts):  # text-only: one string, as every provider takes it
        return "".join(p["text"] for p in parts)
    return parts


def _tool_call(call: ToolCall) -> dict[str, Any]:
    if not call.get("id"):
        raise InvalidChatMessage(f"the tool call {call.get('name')!r} has no id: its result could not answer it")
    return {"id": call["id"], "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("args") or {}, ensure_ascii=False)}}


def chat_from_langchain(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as an OpenAI chat message, its `id` the message's (if it has one)."""
    role = _ROLES.get(message.type)
    if role is None:
        raise InvalidChatMessage(f"a LangChain {type(message).__name__} ({message.type!r}) cannot be stored: "
                                 "human, system, ai and tool messages can")
    chat: dict[str, Any] = {"role": role, "content": _content(message.content)}
    if isinstance(message, AIMessage) and message.tool_calls:
        chat["tool_calls"] = [_tool_call(call) for call in message.tool_calls]
        chat["content"] = chat["content"] or None
    if isinstance(message, ToolMessage):
        chat["tool_call_id"] = message.tool_call_id
    if message.id:
        chat["id"] = message.id
    return chat


def chats_from_langchain(messages: Iterable[BaseMessage]) -> list[dict[str, Any]]:
    """`chat_from_langchain` of each message, in order."""
    return [chat_from_langchain(m) for m in messages]


def _arguments(raw: Any) -> dict[str, Any]:
    """A chat tool call's arguments as LangChain's `args` (a dict: text that is not a JSON
    object is kept whole under `_raw`, as the model wrote it)."""
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        parsed = json.loads(raw or "{}")
    except (TypeError, json.JSONDecodeError):
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_raw": str(raw)}


def langchain_from_chat(chat: Mapping[str, Any]) -> AnyMessage:
    """An OpenAI chat message (as the window's `chat` holds) as a LangChain message."""
    role, content = chat.get("role"), chat.get("content")
    text: str | list[str | dict[Any, Any]] = content if isinstance(content, (str, list)) else ""
    extra = {"id": str(chat["id"])} if chat.get("id") else {}
    if role == "system":
        return SystemMessage(content=text, **extra)
    if role == "user":
        return HumanMessage(content=text, **extra)
    if role == "assistant":
        calls = [ToolCall(name=str(c["function"]["name"]), args=_arguments(c["function"].get("arguments")),
                          id=str(c["id"]), type="tool_call") for c in chat.get("tool_calls") or ()]
        return AIMessage(content=text, tool_calls=calls, **extra)
    if role == "tool":
        return ToolMessage(content=text, tool_call_id=str(chat.get("tool_call_id")), **extra)
    raise InvalidChatMessage(f"a chat message's role must be user, assistant, system or tool, not {role!r}")


def langchain_from_chats(chats: Sequence[Mapping[str, Any]]) -> list[AnyMessage]:
    """`langchain_from_chat` of each message, in order."""
    return [langchain_from_chat(c) for c in chats]
