"""The base of every wire model: frozen, camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["SCHEMA_VERSION", "WireModel", "iso"]

#: Version of the wire format written by this build; newer records go to the dead-letter topic.
SCHEMA_VERSION = 1


class WireModel(BaseModel):
    """Immutable value with camelCase JSON names (`threadId`) and snake_case attributes."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
    )

    def wire(self) -> dict:
        """The JSON-ready dict, camelCase, without unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def iso(ts: datetime) -> str:
    """JavaScript's `toISOString()`: UTC, millisecond precision, `Z` suffix."""
    ts = ts.astimezone(timezone.utc)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"

