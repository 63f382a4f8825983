"""The agent's working-memory tool: `updateWorkingMemory` (`setWorkingMemory` under
`workingMemory.useStateSignals`), which replaces the memory's working-memory document.

    from omstream.client.working_memory_tool import WorkingMemoryTool

    tool = WorkingMemoryTool(om, thread_id="t1")          # om: an OmClient; ValueError when not agent-managed
    reply = await litellm.acompletion(model=..., messages=window["chat"], tools=[tool.definition])
    for call in reply.choices[0].message.tool_calls or []:
        messages.append(await tool.answer(call))

It exists when the configuration keeps a working memory for the agent (`workingMemory.enabled`,
or `observation.manageWorkingMemory`, with `workingMemory.agentManaged` true).  Its one argument,
`memory`, is the whole document: markdown after `workingMemory.template`, or a JSON object of
`workingMemory.schema`.  A call becomes a `working-memory-set` record on the log; the fold
applies it in order with the thread's messages and tells it by `om-working-memory-updated`
(a document the fold refuses goes to the dead letters with the reason).  The tool checks what it
can before sending, and answers the model `{"error": reason}` so it can correct itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omstream.engine.rules.extraction import working_memory_problem, working_memory_schema
from omstream.engine.rules.resolution import resolve

from .function_tool import FunctionTool

if TYPE_CHECKING:
    from .om_client import OmClient

__all__ = ["WorkingMemoryTool", "working_memory_tool_definition"]


def working_memory_tool_definition(name: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    """The tool as an OpenAI-style function definition: `memory` is markdown, or the schema's object."""
    memory = (schema if schema is not None else
              {"type": "string", "description": "The whole updated working memory, in the template's markdown."})
    return {"type": "function", "function": {
        "name": name,
        "description": ("Replace the user's working memory (durable facts about them, their goals and their "
                        "work) with the whole updated document, keeping what still holds."),
        "parameters": {"type": "object", "properties": {"memory": memory}, "required": ["memory"],
                       "additionalProperties": False},
    }}


class WorkingMemoryTool(FunctionTool):
    """The working-memory tool of one thread, written through an `OmClient`."""

    def __init__(self, client: OmClient, thread_id: str, *, resource_id: str | None = None) -> None:
        om = client.settings.om
        resolved = resolve(om).working_memory
        if not resolved.agent_managed:
            raise ValueError("the configuration keeps no working memory for the agent to write "
                             "(workingMemory.enabled / workingMemory.agentManaged)")
        self.client, self.thread_id, self.resource_id = client, thread_id, resource_id
        self.options = om.working_memory
        self.name = resolved.tool_name
        self.definition = working_memory_tool_definition(self.name, working_memory_schema(self.options))

    async def run(self, args: dict[str, Any]) -> dict[str, Any]:
        if "memory" not in args:
            return {"error": "the arguments must be a JSON object with `memory`"}
        problem = working_memory_problem(self.options, args["memory"])
        if problem is not None:
            return {"error": problem}
        await self.client.set_working_memory(self.thread_id, args["memory"], resource_id=self.resource_id)
        return {"success": True}
