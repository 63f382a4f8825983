"""`workingMemory`: the per-thread document `observation.manageWorkingMemory` keeps."""

from __future__ import annotations

from pydantic import Field, field_serializer

from .base import Options
from .references import SchemaOption, code_name

__all__ = ["WORKING_MEMORY_TEMPLATE", "WorkingMemoryConfig"]

#: The default markdown working memory (the shape of the original's default template).
WORKING_MEMORY_TEMPLATE = """# User Information
- **First Name**:
- **Last Name**:
- **Location**:
- **Occupation**:
- **Interests**:
- **Goals**:
- **Events**:
- **Facts**:
- **Projects**:"""


class WorkingMemoryConfig(Options):
    """The per-thread working-memory document `observation.manageWorkingMemory` keeps.

    omstream keeps it with the memory's options (the original configures it on `Memory`):
    markdown following `template`, or, with `schema` (a JSON Schema object or a
    `"module:PydanticModel"` reference), a JSON object the Observer returns as a structured value.
    """

    template: str = WORKING_MEMORY_TEMPLATE
    """The markdown document the Observer fills in and keeps up to date."""
    schema_: SchemaOption = Field(default=None, alias="schema")
    """Keep a JSON object instead of markdown: a JSON Schema object or a `"module:PydanticModel"`
    reference; the Observer returns it through a structured follow-up call."""

    _code_by_name = field_serializer("schema_")(lambda self, value: code_name(value))
