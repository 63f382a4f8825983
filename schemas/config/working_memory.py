"""`workingMemory`: the memory's working-memory document, who writes it, and how the agent sees it."""

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
    """The memory's working-memory document: durable facts about the user, kept across turns.

    omstream keeps it with the memory's options (the original configures it on `Memory`):
    markdown following `template`, or, with `schema` (a JSON Schema object or a
    `"module:PydanticModel"` reference), a JSON object.  The agent writes it with a tool
    (`agentManaged`), or the Observer does (`observation.manageWorkingMemory`), or both.
    """

    enabled: bool = False
    """Keep a working-memory document for the memory and show it to the agent.
    `observation.manageWorkingMemory` turns it on too (the Observer keeps it)."""
    agent_managed: bool | None = None
    """The agent writes the document itself, with the `updateWorkingMemory` tool (`setWorkingMemory`
    under `useStateSignals`), and its context says how; when false the context shows the document
    read-only. Default: true, false when `observation.manageWorkingMemory` is on."""
    use_state_signals: bool | None = None
    """Show the document to the agent as a state signal (the context answer's `stateSignals`, with
    a `cacheKey` that changes only with the document) instead of inside the system messages.
    Default: false, true when `observation.manageWorkingMemory` is on."""
    template: str = WORKING_MEMORY_TEMPLATE
    """The markdown document the Observer fills in and keeps up to date."""
    schema_: SchemaOption = Field(default=None, alias="schema")
    """Keep a JSON object instead of markdown: a JSON Schema object or a `"module:PydanticModel"`
    reference; the Observer returns it through a structured follow-up call."""

    _code_by_name = field_serializer("schema_")(lambda self, value: code_name(value))
