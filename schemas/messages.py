"""Chat messages as producers write them to the input log `<ns>.log`.

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

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator

from .base import SCHEMA_VERSION, Count, NonEmptyStr, Timestamp, WireModel
from .errors import OmError

__all__ = [
    "Content",
    "DataPart",
    "FilePart",
    "ImagePart",
    "InvalidMessage",
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
    "one_line",
]

Role = Literal["user", "assistant", "system", "tool"]


class _Part(WireModel):
    """What every part may carry besides its own fields: the AI SDK's provider pass-through.

    `providerMetadata.mastra.tokenEstimate` is where a caller may pin an attachment's token
    count (spec §5.3); `providerOptions` holds per-provider hints such as an image's detail.
    """

    provider_options: dict[str, Any] | None = None
    """Per-provider hints, keyed by provider (for example `{"openai": {"imageDetail": "low"}}`);
    passed through unchanged. Absent when there are none."""
    provider_metadata: dict[str, Any] | None = None
    """Provider and framework metadata, keyed by provider. `mastra.tokenEstimate` pins an
    attachment's token count; `mastra.modelOutput` on a tool result is what the model saw and is
    preferred over `result`. Absent when there is none."""


class TextPart(_Part):
    type: Literal["text"] = "text"
    """Part kind: always `text`."""
    text: str
    """The text, as the speaker wrote it."""


class ReasoningPart(_Part):
    """The model's reasoning: counted as 0 tokens (spec §5.2), shown to the observer as `Reasoning`."""

    type: Literal["reasoning"] = "reasoning"
    """Part kind: always `reasoning`."""
    text: str
    """The model's reasoning text; never sent back to the agent."""


class ImagePart(_Part):
    """An image as a URL, a `data:` URI or bare base64."""

    type: Literal["image"] = "image"
    """Part kind: always `image`."""
    image: NonEmptyStr
    """The image: an `http(s)` URL, a `data:` URI, or bare base64 bytes."""
    mime_type: str | None = None
    """The image's media type (`image/png`). Absent when unknown (read from a `data:` URI or the
    bytes when needed)."""
    filename: str | None = None
    """The file name, shown to the observer as the image's label. Absent when unnamed."""
    width: int | None = Field(default=None, ge=1)
    """Width in pixels, used for the token estimate. Absent when unknown (read from inline bytes)."""
    height: int | None = Field(default=None, ge=1)
    """Height in pixels, used for the token estimate. Absent when unknown (read from inline bytes)."""
    detail: Literal["low", "high", "auto"] | None = None
    """OpenAI image detail level, which changes its token cost. Absent means `auto`."""


class FilePart(_Part):
    """A file by `url` or inline base64 `data`: exactly one of the two."""

    # The same rule for JSON Schema users, who never run the validator below.
    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["data"]}, {"required": ["url"]}]})

    type: Literal["file"] = "file"
    """Part kind: always `file`."""
    data: NonEmptyStr | None = None
    """The file's bytes, base64 (or a `data:` URI). Absent when the file is given by `url`."""
    url: NonEmptyStr | None = None
    """Where the file is. Absent when the file is given inline as `data`."""
    mime_type: NonEmptyStr
    """The file's media type (`application/pdf`); an `image/*` type makes it count as an image."""
    filename: str | None = None
    """The file name, shown to the observer as the file's label. Absent when unnamed."""

    @model_validator(mode="after")
    def _one_source(self) -> FilePart:
        if (self.data is None) == (self.url is None):
            raise ValueError("a file part needs exactly one of `data` (base64) or `url`")
        return self


#: The parts a multimodal tool result may hold.
ToolResultContent = Annotated[TextPart | ImagePart | FilePart, Field(discriminator="type")]


class ToolCallPart(_Part):
    type: Literal["tool-call"] = "tool-call"
    """Part kind: always `tool-call`."""
    tool_call_id: NonEmptyStr
    """The call's id; the `tool-result` that answers it carries the same id."""
    tool_name: NonEmptyStr
    """The name of the tool called."""
    args: dict[str, Any] | str
    """The call's arguments: a JSON object, or the JSON text as the model streamed it."""


class ToolResultPart(_Part):
    """A tool's answer: a `result` value, multimodal `content`, an error, or a denial."""

    type: Literal["tool-result"] = "tool-result"
    """Part kind: always `tool-result`."""
    tool_call_id: NonEmptyStr
    """The id of the `tool-call` this result answers."""
    tool_name: NonEmptyStr
    """The name of the tool that ran."""
    result: Any = None
    """The tool's return value, any JSON. Absent when the tool returned nothing, failed, or was
    denied, or when the result is given as `content`."""
    is_error: bool | None = None
    """True when the tool failed; `error` (or `result`) then says why. Absent means it succeeded."""
    error: str | None = None
    """The failure or denial text. Absent when the tool succeeded (a failure without text is shown
    as `Tool execution failed`)."""
    denied: bool | None = None
    """True when the user did not approve the call; `error` or a string `result` is the reason.
    Absent means the call was not denied."""
    content: list[ToolResultContent] | None = None
    """A multimodal result as text, image and file parts (images are priced as images). Absent
    when the result is a plain `result` value."""


class DataPart(_Part):
    """Application data under any `data-*` type; counted as 0 tokens."""

    # A name after `data-` that starts with a word character; the class is spelled out because
    # `.` and `\s` differ between regex engines (JSON Schema users run ECMA-262 ones).
    type: Annotated[str, Field(pattern=r"^data-[A-Za-z0-9_]")]
    """Part kind: `data-` and an application-chosen name (`data-om-status`, `data-weather`)."""
    data: Any = None
    """The application's payload, any JSON; never shown to the agent or the observer. Absent when
    the part carries none."""


def _part_kind(value: Any) -> str | None:
    """Route every `data-*` type to `DataPart`; the other types name their own model."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if isinstance(kind, str) and kind.startswith("data-"):
        return "data"
    return kind if isinstance(kind, str) else None


#: One content part.  Discriminated by `type`; all `data-*` types share one model.
MessagePart = Annotated[
    Annotated[TextPart, Tag("text")]
        | Annotated[ImagePart, Tag("image")]
        | Annotated[FilePart, Tag("file")]
        | Annotated[ToolCallPart, Tag("tool-call")]
        | Annotated[ToolResultPart, Tag("tool-result")]
        | Annotated[ReasoningPart, Tag("reasoning")]
        | Annotated[DataPart, Tag("data")],
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
    Annotated[str, Tag("text")] | Annotated[list[MessagePart], Tag("parts")],
    Discriminator(
        _content_kind,
        custom_error_type="content_type",
        custom_error_message="content must be a string or a list of parts",
    ),
]


class TokenCount(WireModel):
    """A count taken at ingest, with the name of the counter that took it."""

    counter: NonEmptyStr
    """The name of the token counter that took the count (for example `tokenx`); a count by
    another counter than the worker's is taken again."""
    count: Count
    """The message's size, in tokens."""


class MessageMetadata(WireModel):
    """Known keys are typed; any other key passes through unchanged."""

    model_config = ConfigDict(extra="allow")

    provider: str | None = None
    """The agent's model provider for this message (`openai`); a change can activate buffered
    observations. Absent when the producer does not say."""
    model: str | None = None
    """The agent's model for this message (`gpt-4o`); a change can activate buffered
    observations. Absent when the producer does not say."""
    client_token_estimate: Count | None = None
    """The producer's own estimate of the message's size, in tokens. Absent when not given."""


class InvalidMessage(OmError, ValueError):
    """A `Message` built from fields it cannot have, said in one line: the field and the
    problem (pydantic's own error, one paragraph per problem, is for decoders, not people)."""


def one_line(exc: ValidationError, shown: int = 3) -> str:
    """A validation error's problems as `field: problem; ...` on one line, the first `shown`."""
    problems = [f"{'.'.join(str(p) for p in err['loc']) or '(record)'}: {err['msg']}".replace("\n", " ")
                for err in exc.errors()]
    more = f" (and {len(problems) - shown} more)" if len(problems) > shown else ""
    return "; ".join(problems[:shown]) + more


class Message(WireModel):
    """One chat message, the unit the observer compresses."""

    type: Literal["message"] = "message"
    """Record kind: always `message`; may be left out (a record without `type` is a message)."""
    schema_version: int = SCHEMA_VERSION
    """The wire-format version the producer wrote; records newer than the worker's go to the
    dead-letter topic. Absent means the current version."""
    id: NonEmptyStr
    """The message's id, unique in its thread; a re-sent id is ignored."""
    thread_id: NonEmptyStr
    """The conversation the message belongs to."""
    resource_id: str | None = None
    """The user or other owner of the thread (resource-scope memories span its threads). Absent
    for thread-scoped memories that do not name one."""
    role: Role
    """Who wrote the message: `user`, `assistant`, `system` or `tool`."""
    content: Content
    """The message: a string, or a list of typed parts (text, image, file, tool-call,
    tool-result, reasoning, data-*)."""
    created_at: Timestamp
    """When the message was written, ISO-8601 with a time zone; orders the thread and dates the
    observations."""
    metadata: MessageMetadata | None = None
    """The agent's provider and model and other producer metadata. Absent when there is none."""
    tokens: TokenCount | None = None
    """The token count taken at ingest. Absent when the producer did not count; the worker counts
    then."""

    def __init__(self, /, **data: Any) -> None:
        # Built in code (`Message(id=..., ...)`), a field it cannot have is said in one line
        # (`InvalidMessage`); decoders (`model_validate`, the worker's and the readers') keep
        # pydantic's error and its speed: see the marker below.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidMessage(f"invalid message: {one_line(exc)}") from None

    # pydantic runs a model's own `__init__` inside every validation (a message nested in an
    # event, `model_validate`) unless it is marked as the base one: marked, it runs only when
    # the class is called.  tests/unit/client/test_client_refusals.py checks both sides.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def text(self) -> str:
        """The message's text as the observer and token counters read it."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart) and p.text)
