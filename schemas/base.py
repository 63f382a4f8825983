"""The base of every wire model: frozen, camelCase on the wire, snake_case in Python.

Everything that crosses a topic (messages, control records, model jobs and results, lifecycle
events) is a `WireModel`, so one set of rules holds for all of them: unknown keys are refused
(a typo is an error, not silently dropped data), unset optional fields are left out of the JSON,
and times must carry a time zone (a naive time means a different instant on every host).

Every field is documented by the docstring under it: `use_attribute_docstrings` makes that text
the field's `description` in the exported JSON Schema, which is what UI developers read.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = ["SCHEMA_VERSION", "Count", "NonEmptyStr", "Timestamp", "WireModel", "iso"]

#: Version of the wire format written by this build; newer records go to the dead-letter topic.
SCHEMA_VERSION = 1


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("the time needs a time zone (use an ISO-8601 string ending in Z)")
    return value


#: An instant: ISO-8601 on the wire, always with a time zone.
Timestamp = Annotated[datetime, AfterValidator(_aware)]
#: A token count, a duration or any other quantity that cannot be negative.
Count = Annotated[int, Field(ge=0)]
#: An identifier: present and not empty.
NonEmptyStr = Annotated[str, Field(min_length=1)]


class WireModel(BaseModel):
    """Immutable value with camelCase JSON names (`threadId`) and snake_case attributes."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        # The docstring under a field is its JSON Schema `description` (schemas/json/*.json).
        use_attribute_docstrings=True,
    )

    def wire(self) -> dict[str, Any]:
        """The JSON-ready dict, camelCase, without unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def iso(ts: datetime) -> str:
    """JavaScript's `toISOString()`: UTC, millisecond precision, `Z` suffix."""
    ts = ts.astimezone(UTC)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"
