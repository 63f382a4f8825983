"""How the agent is shown the working-memory document (`workingMemory` options).

Three ways, as 1.31.0 has them (its `Memory.getSystemMessage` and working-memory state
processor), in omstream's words:

- agent-managed (`agentManaged`, the default): a system message with the template, the
  current document, and how to keep it with the `updateWorkingMemory` tool;
- kept for the agent (`agentManaged = false`, e.g. the Observer keeps it): the same, read-only;
- as a state signal (`useStateSignals`, the default when the Observer keeps it): not in the
  system messages; the context answer's `stateSignals` carries it, with a `cacheKey` (a hash of
  the document) that changes only when the document does, so an agent can re-send it only then.
  The chat shows it as one message after the system messages.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from omstream.engine.rules.extraction import working_memory_schema
from omstream.engine.rules.resolution import resolve
from omstream.schemas.config import OmConfig

__all__ = ["STATE_ID", "WorkingMemoryRendering", "state_signal", "working_memory_system_message"]

#: The state signal's id (the original's `WORKING_MEMORY_STATE_ID`).
STATE_ID = "working-memory"


@dataclass(frozen=True)
class WorkingMemoryRendering:
    """The options the read side needs to show the document (None on a view: no working memory)."""

    agent_managed: bool
    use_state_signals: bool
    tool_name: str
    template: str | None          # None with a schema
    schema: dict[str, Any] | None

    @classmethod
    def of(cls, om: OmConfig) -> WorkingMemoryRendering | None:
        resolved = resolve(om).working_memory
        if not resolved.enabled:
            return None
        options = om.working_memory
        schema = working_memory_schema(options)
        return cls(resolved.agent_managed, resolved.use_state_signals, resolved.tool_name,
                   options.template if schema is None else None, schema)


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _document(rendering: WorkingMemoryRendering, value: Any) -> str:
    shape = (f"Template:\n{rendering.template}" if rendering.template is not None
             else "It is a JSON object" + (f" of this schema: {_shown(rendering.schema)}" if rendering.schema else "."))
    current = "(empty)" if value is None else _shown(value)
    return f"{shape}\n\nCurrent working memory:\n{current}"


def working_memory_system_message(rendering: WorkingMemoryRendering, value: Any) -> str | None:
    """The system message that shows the document (None when it goes as a state signal)."""
    if rendering.use_state_signals:
        return None
    if rendering.agent_managed:
        how = (f"Keep it current with the `{rendering.tool_name}` tool: when you learn something durable "
               "about the user (who they are, what they want, what they are working on), call it "
               "with the whole updated document, keeping what still holds. Do not mention the tool "
               "or this memory to the user.")
    else:
        how = "It is kept for you from the conversation: read it, do not try to change it."
    return (f"<working-memory>\nWORKING MEMORY: what you know about the user across conversations. {how}\n\n"
            f"{_document(rendering, value)}\n</working-memory>")


def state_signal(rendering: WorkingMemoryRendering, value: Any) -> dict[str, Any] | None:
    """The document as a state signal `{id, cacheKey, content}` (None unless `useStateSignals`)."""
    if not rendering.use_state_signals:
        return None
    content = _document(rendering, value)
    if rendering.agent_managed:
        content += f"\n\nUpdate it with the `{rendering.tool_name}` tool (the whole document)."
    digest = hashlib.sha256(orjson.dumps({"format": "markdown" if rendering.template is not None else "json",
                                          "data": value})).hexdigest()
    return {"id": STATE_ID, "cacheKey": digest, "content": f'<state id="{STATE_ID}">\n{content}\n</state>'}
