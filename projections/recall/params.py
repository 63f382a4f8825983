"""The `recall` tool's parameters (spec §12), as the HTTP route, the client and the agent's tool
call pass them: camelCase, checked here, so a bad one is refused with its reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from omstream.schemas.errors import OmError

__all__ = ["PART_TYPES", "RecallError", "RecallParams", "parse_date", "parse_params"]

PART_TYPES = ("text", "tool-call", "tool-result", "reasoning", "image", "file")
NonEmpty = Annotated[str, Field(min_length=1)]


class RecallError(OmError, ValueError):
    """A recall the read side cannot answer as asked (a bad parameter, a cursor it cannot see);
    the message says what to do instead (the agent reads it)."""


def parse_date(raw: str) -> datetime:
    """An ISO 8601 date or time (`2026-03-15`, `2026-03-10T00:00:00Z`); a time without zone is UTC."""
    try:
        at = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise RecallError(f"not an ISO 8601 date: {raw!r} (e.g. 2026-03-15 or 2026-03-10T00:00:00Z)") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


class RecallParams(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    mode: Literal["messages", "threads", "search"] = "messages"
    query: NonEmpty | None = None
    cursor: NonEmpty | None = None
    thread_id: NonEmpty | None = None
    anchor: Literal["start", "end"] = "start"
    page: Annotated[int, Field(ge=-50, le=50)] | None = None
    limit: Annotated[int, Field(ge=1, le=50)] | None = None
    detail: Literal["low", "high"] = "low"
    part_type: Literal["text", "tool-call", "tool-result", "reasoning", "image", "file"] | None = None
    tool_name: NonEmpty | None = None
    part_index: Annotated[int, Field(ge=0)] | None = None
    char_offset: Annotated[int, Field(ge=0)] | None = None
    before: str | None = None
    after: str | None = None

    @field_validator("before", "after")
    @classmethod
    def _date(cls, value: str | None) -> str | None:
        if value is not None:
            parse_date(value)
        return value


def parse_params(raw: dict[str, Any]) -> RecallParams:
    """The parameters of `raw` (JSON or query-string values), or `RecallError` naming the bad one."""
    try:
        return RecallParams.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "parameters"
        reason = str(first["msg"])
        if isinstance(first.get("ctx", {}).get("error"), RecallError):
            reason = str(first["ctx"]["error"])
        raise RecallError(f"{where}: {reason}") from None
