"""Chat messages as producers write them to `<ns>.messages`.

A record is one message, flat, so any language can produce it::

    {"id": "m1", "threadId": "t1", "resourceId": "u1", "role": "user",
     "content": "hello", "createdAt": "2025-03-03T09:00:00Z"}

`content` is a string or a list of parts.  `tokens` is optional: the Python client counts at
ingest and sends the count with the counter's name; the worker counts what arrives without one
(or with another counter than the configured one).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from .base import SCHEMA_VERSION, WireModel

__all__ = ["Message", "MessagePart", "Role", "TokenCount"]

Role = Literal["user", "assistant", "system", "tool"]


class MessagePart(WireModel):
    """One content part (`text`, `image`, `file`, `tool-call`, `tool-result`, `reasoning`, `data-*`)."""

    model_config = WireModel.model_config | {"extra": "allow"}

    type: str
    text: str | None = None


class TokenCount(WireModel):
    counter: str
    count: int = Field(ge=0)


class Message(WireModel):
    type: Literal["message"] = "message"
    schema_version: int = SCHEMA_VERSION
    id: str = Field(min_length=1)
    thread_id: str = Field(min_length=1)
    resource_id: str | None = None
    role: Role
    content: str | list[MessagePart]
    created_at: datetime
    metadata: dict[str, Any] | None = None
    tokens: TokenCount | None = None

    @field_validator("created_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("createdAt needs a time zone (use an ISO-8601 string ending in Z)")
        return value

    def text(self) -> str:
        """The message's text as the observer and token counters read it."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if p.type == "text" and p.text)
