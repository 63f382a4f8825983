"""Chat messages as producers write them to `<ns>.messages`.

A record is one message, flat, so any language can produce it::

    {"id": "m1", "threadId": "t1", "resourceId": "u1", "role": "user",
     "content": "hello", "createdAt": "2025-03-03T09:00:00Z"}

`content` is a string or a list of typed parts (the AI SDK's shapes): `text`, `image`, `file`,
`tool-call`, `tool-result`, `reasoning`, and any `data-*` part (application data, for example
the `data-om-*` markers a UI stored on an assistant message).  The parts are typed because the
token counters price each kind differently (spec §5.2-5.3): an unknown part type is refused at
ingest rather than counted wrongly.

`tokens` is optional: the Python client counts at ingest and sends the count with the counter's
name; the worker counts what arrives without one (or with another counter than the configured
one).  `metadata` carries the actor's `provider` and `model` (a change of either can activate
buffered observations) and an optional `clientTokenEstimate`; other keys pass through.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Discriminator, Field, Tag, model_validator

from .base import SCHEMA_VERSION, Count, NonEmptyStr, Timestamp, WireModel

__all__ = [
    "Content",
    "DataPart",
    "FilePart",
    "ImagePart",
    "Message",
    "MessageMetadata",
    "MessagePart",
    "ReasoningPart",
    "Role",
    "TextPart",
    "TokenCount",
    "ToolCallPart",
    "ToolResultContent",
    "ToolResultPart",
]

Role = Literal["user", "assistant", "system", "tool"]


class _Part(WireModel):
    """What every part may carry besides its own fields: the AI SDK's provider pass-through.

    `providerMetadata.mastra.tokenEstimate` is where a caller may pin an attachment's token
    count (spec §5.3); `providerOptions` holds per-provider hints such as an image's detail.
    """

    provider_options: dict[str, Any] | None = None
    provider_metadata: dict[str, Any] | None = None


class TextPart(_Part):
    type: Literal["text"] = "text"
    text: str


class ReasoningPart(_Part):
    """The model's reasoning: counted as 0 tokens (spec §5.2), shown to the observer as `Reasoning`."""

    type: Literal["reasoning"] = "reasoning"
    text: str


class ImagePart(_Part):
    """An image as a URL, a `data:` URI or bare base64."""

    type: Literal["image"] = "image"
    image: NonEmptyStr
    mime_type: str | None = None
    filename: str | None = None
    width: int | None = Field(default=None, ge=1)
    height: int | None = Field(default=None, ge=1)
    detail: Literal["low", "high", "auto"] | None = None


class FilePart(_Part):
    """A file by `url` or inline base64 `data`: exactly one of the two."""

    # The same rule for JSON Schema users, who never run the validator below.
    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["data"]}, {"required": ["url"]}]})

    type: Literal["file"] = "file"
    data: NonEmptyStr | None = None
    url: NonEmptyStr | None = None
    mime_type: NonEmptyStr
    filename: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> FilePart:
        if (self.data is None) == (self.url is None):
            raise ValueError("a file part needs exactly one of `data` (base64) or `url`")
        return self


#: The parts a multimodal tool result may hold.
ToolResultContent = Annotated[Union[TextPart, ImagePart, FilePart], Field(discriminator="type")]


class ToolCallPart(_Part):
    type: Literal["tool-call"] = "tool-call"
    tool_call_id: NonEmptyStr
    tool_name: NonEmptyStr
    args: dict[str, Any] | str


class ToolResultPart(_Part):
    """A tool's answer: a `result` value, multimodal `content`, an error, or a denial."""

    type: Literal["tool-result"] = "tool-result"
    tool_call_id: NonEmptyStr
    tool_name: NonEmptyStr
    result: Any = None
    is_error: bool | None = None
    error: str | None = None
    denied: bool | None = None
    content: list[ToolResultContent] | None = None


class DataPart(_Part):
    """Application data under any `data-*` type; counted as 0 tokens."""

    # A name after `data-` that starts with a word character; the class is spelled out because
    # `.` and `\s` differ between regex engines (JSON Schema users run ECMA-262 ones).
    type: Annotated[str, Field(pattern=r"^data-[A-Za-z0-9_]")]
    data: Any = None


def _part_kind(value: Any) -> str | None:
    """Route every `data-*` type to `DataPart`; the other types name their own model."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if isinstance(kind, str) and kind.startswith("data-"):
        return "data"
    return kind if isinstance(kind, str) else None


#: One content part.  Discriminated by `type`; all `data-*` types share one model.
MessagePart = Annotated[
    Union[
        Annotated[TextPart, Tag("text")],
        Annotated[ImagePart, Tag("image")],
        Annotated[FilePart, Tag("file")],
        Annotated[ToolCallPart, Tag("tool-call")],
        Annotated[ToolResultPart, Tag("tool-result")],
        Annotated[ReasoningPart, Tag("reasoning")],
        Annotated[DataPart, Tag("data")],
    ],
    Discriminator(
        _part_kind,
        custom_error_type="part_type",
        custom_error_message=(
            "unknown part type: use text, image, file, tool-call, tool-result, reasoning or data-*"
        ),
    ),
]


def _content_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "text"
    return "parts" if isinstance(value, list | tuple) else None


#: A message's content: a string, or a list of parts.  Told apart up front so an invalid part
#: is reported as such, not also as "not a string".
Content = Annotated[
    Union[Annotated[str, Tag("text")], Annotated[list[MessagePart], Tag("parts")]],
    Discriminator(
        _content_kind,
        custom_error_type="content_type",
        custom_error_message="content must be a string or a list of parts",
    ),
]


class TokenCount(WireModel):
    """A count taken at ingest, with the name of the counter that took it."""

    counter: NonEmptyStr
    count: Count


class MessageMetadata(WireModel):
    """Known keys are typed; any other key passes through unchanged."""

    model_config = ConfigDict(extra="allow")

    provider: str | None = None
    model: str | None = None
    client_token_estimate: Count | None = None


class Message(WireModel):
    """One chat message, the unit the observer compresses."""

    type: Literal["message"] = "message"
    schema_version: int = SCHEMA_VERSION
    id: NonEmptyStr
    thread_id: NonEmptyStr
    resource_id: str | None = None
    role: Role
    content: Content
    created_at: Timestamp
    metadata: MessageMetadata | None = None
    tokens: TokenCount | None = None

    def text(self) -> str:
        """The message's text as the observer and token counters read it."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if p.type == "text" and p.text)
