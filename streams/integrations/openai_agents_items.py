"""Responses-API input items (what the OpenAI Agents SDK keeps in a session) as chat messages,
and back: the pure conversion under `omstream.integrations.openai_agents.OmSession`.

It needs no SDK: items are the plain dicts the SDK hands a session (pydantic items are dumped
first), chat messages the OpenAI shape `ThreadMemory.add` stores and the window's `chat` holds.

Items to chat (`items_to_chat`, what is stored):

* a message (`{"role": ..., "content": ...}`, with or without `"type": "message"`): `user` and
  `system` keep their role, `developer` is stored as `system`, `assistant` as `assistant`.
  Content parts: `input_text` / `output_text` are text, a `refusal` its text, `input_image` an
  image (by `image_url`), `input_file` a file (`file_data` or `file_url`); an assistant's content
  is stored as its text;
* `function_call` items: one assistant message whose `tool_calls` hold the run of consecutive
  calls (parallel calls stay one message, so each result finds its call in the window);
* `function_call_output`: a `tool` message answering its `call_id` (a list output of text parts
  is stored as their text, any other list as its JSON);
* `reasoning`: not stored.  The window never gives reasoning back to the model (the chat view
  drops it), so storing it would only cost observation tokens;
* anything else (hosted tool calls such as `web_search_call`, `computer_call`, `mcp_call`,
  custom tools, `item_reference`, ...) has no chat form: `UnsupportedItem`, naming the type.

Ids: an item's own `id` becomes the stored message's id, so a re-sent item is stored once; a
function call without one is keyed by its `call_id`, a call's output by `<call_id>:output`.  The
SDK's placeholder id (`FAKE_ID`, what models on the Chat Completions API get) is no id.  Items
without any id (the user's input as a string) get `ThreadMemory`'s run-local ids.

Chat to items (`chat_to_items`, what the model is given): `system` and `user` messages as
messages (user content parts as `input_text` / `input_image` / `input_file`), an assistant's
text as an assistant message, each of its `tool_calls` as a `function_call`, a `tool` message as
a `function_call_output` with the same `call_id`.  The items carry no `id`: the stored ids are
not ids the Responses API issued, and it refuses input items with ids it does not know.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from omstream.schemas.errors import OmError

__all__ = ["FAKE_ID", "UnsupportedItem", "as_dict", "chat_to_items", "item_id", "items_to_chat"]

#: `agents.models.fake_id.FAKE_RESPONSES_ID`: the id the SDK gives items of non-Responses models.
FAKE_ID = "__fake_id__"
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_PARTS = ("input_text", "output_text", "text")


class UnsupportedItem(OmError, ValueError):
    """A session item with no chat form (a hosted tool call, an item reference, ...)."""


def as_dict(item: Any) -> dict[str, Any]:
    """An item as a plain dict (the SDK may hand over its pydantic models)."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        dumped = dump(exclude_unset=True)
        if isinstance(dumped, dict):
            return dumped
    raise UnsupportedItem(f"a session item must be a dict or a pydantic model, not {type(item).__name__}")


def item_id(item: Mapping[str, Any]) -> str | None:
    """The item's own id, if it has a real one."""
    value = item.get("id")
    return value if isinstance(value, str) and value and value != FAKE_ID else None


# --- items -> chat ----------------------------------------------------------------------------
def _part_to_chat(part: Any) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    kind = part.get("type")
    if kind in _TEXT_PARTS:
        return {"type": "text", "text": str(part.get("text") or "")}
    if kind == "refusal":
        return {"type": "text", "text": str(part.get("refusal") or "")}
    if kind == "input_image":
        if not part.get("image_url"):
            raise UnsupportedItem("an input_image without image_url (an uploaded file_id) cannot be stored")
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        if not (part.get("file_data") or part.get("file_url")):
            raise UnsupportedItem("an input_file needs file_data or file_url (an uploaded file_id cannot be stored)")
        file = {key: part[key] for key in ("file_data", "file_url", "filename") if part.get(key)}
        return {"type": "file", "file": file}
    raise UnsupportedItem(f"a content part of type {kind!r} cannot be stored "
                          f"(input_text, output_text, refusal, input_image, input_file)")


def _content_to_chat(content: Any, *, text_only: bool) -> str | list[dict[str, Any]]:
    if content is None or isinstance(content, str):
        return content or ""
    parts = [_part_to_chat(part) for part in content]
    if text_only or all(p["type"] == "text" for p in parts):
        if not all(p["type"] == "text" for p in parts):
            raise UnsupportedItem("an assistant or system message can only hold text")
        return "".join(p["text"] for p in parts)
    return parts


def _output_to_chat(output: Any) -> str:
    """A function call's output as the tool message's text."""
    if output is None or isinstance(output, str):
        return output or ""
    if isinstance(output, list) and all(isinstance(p, Mapping) and p.get("type") in _TEXT_PARTS for p in output):
        return "".join(str(p.get("text") or "") for p in output)
    return json.dumps(output, ensure_ascii=False)


def _message_to_chat(item: Mapping[str, Any]) -> dict[str, Any]:
    role = _ROLES.get(str(item.get("role")))
    if role is None:
        raise UnsupportedItem(f"a message's role must be user, system, developer or assistant, "
                              f"not {item.get('role')!r}")
    chat: dict[str, Any] = {"role": role,
                            "content": _content_to_chat(item.get("content"), text_only=role != "user")}
    if (own := item_id(item)) is not None:
        chat["id"] = own
    return chat


def _call(item: Mapping[str, Any]) -> dict[str, Any]:
    if not item.get("call_id") or not item.get("name"):
        raise UnsupportedItem("a function_call needs a call_id and a name")
    return {"id": str(item["call_id"]), "type": "function",
            "function": {"name": str(item["name"]), "arguments": str(item.get("arguments") or "{}")}}


def items_to_chat(items: Iterable[Any]) -> list[dict[str, Any]]:
    """Session items as chat messages to store (see the module docstring); each carries the
    `id` it is stored under when the item has one."""
    chat: list[dict[str, Any]] = []
    calls: dict[str, Any] | None = None  # the assistant message collecting consecutive calls
    for raw in items:
        item = as_dict(raw)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "function_call":
            if calls is None:
                calls = {"role": "assistant", "content": None, "tool_calls": [],
                         "id": item_id(item) or str(item.get("call_id") or "")}
                chat.append(calls)
            calls["tool_calls"].append(_call(item))
            continue
        calls = None
        if kind == "message":
            chat.append(_message_to_chat(item))
        elif kind == "function_call_output":
            if not item.get("call_id"):
                raise UnsupportedItem("a function_call_output needs the call_id of the call it answers")
            call_id = str(item["call_id"])
            chat.append({"role": "tool", "tool_call_id": call_id, "content": _output_to_chat(item.get("output")),
                         "id": item_id(item) or f"{call_id}:output"})
        elif kind == "reasoning":
            continue  # never given back to the model: see the module docstring
        else:
            raise UnsupportedItem(f"a session item of type {kind!r} has no chat form and cannot be stored "
                                  f"(messages, function_call, function_call_output; reasoning is skipped)")
    for message in chat:
        if not message.get("id"):
            message.pop("id", None)
    return chat


# --- chat -> items ----------------------------------------------------------------------------
def _part_to_item(part: Any) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "input_text", "text": part}
    kind = part.get("type")
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        out: dict[str, Any] = {"type": "input_image", "image_url": str(url),
                               "detail": (image.get("detail") if isinstance(image, Mapping) else None) or "auto"}
        return out
    if kind == "file":
        file = part.get("file") or {}
        link = file.get("file_url") or file.get("file_id")  # the window spells a link `file_id`
        out = {"type": "input_file"}
        if file.get("file_data"):
            out["file_data"] = file["file_data"]
        elif link:
            out["file_url"] = link
        if file.get("filename"):
            out["filename"] = file["filename"]
        return out
    return {"type": "input_text", "text": str(part.get("text") or "")}


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(str(p.get("text") or "") if isinstance(p, Mapping) else str(p) for p in content)


def chat_to_items(chat: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages (a window's `chat`) as Responses input items (see the module docstring)."""
    items: list[dict[str, Any]] = []
    for message in chat:
        role, content = message.get("role"), message.get("content")
        if role == "tool":
            output: Any = content if isinstance(content, str) else [_part_to_item(p) for p in content or []]
            items.append({"type": "function_call_output", "call_id": str(message.get("tool_call_id")),
                          "output": output})
        elif role == "assistant":
            text = _text(content)
            if text:
                items.append({"type": "message", "role": "assistant", "content": text})
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                items.append({"type": "function_call", "call_id": str(call.get("id")),
                              "name": str(function.get("name")), "arguments": str(function.get("arguments") or "{}")})
        elif role == "user" and isinstance(content, list):
            items.append({"type": "message", "role": "user", "content": [_part_to_item(p) for p in content]})
        else:
            items.append({"type": "message", "role": "system" if role == "system" else "user",
                          "content": _text(content)})
    return items
