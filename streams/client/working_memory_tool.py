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

import json
from typing import TYPE_CHECKING, Any

from omstream.engine.rules.extraction import working_memory_problem, working_memory_schema
from omstream.engine.rules.resolution import resolve

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


class WorkingMemoryTool:
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

    async def __call__(self, arguments: str | dict[str, Any]) -> dict[str, Any]:
        """The tool's result for the model's arguments (a JSON object, or its text)."""
        try:
            args = json.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments)
        except json.JSONDecodeError as exc:
            return {"error": f"the arguments are not a JSON object: {exc}"}
        if not isinstance(args, dict) or "memory" not in args:
            return {"error": "the arguments must be a JSON object with `memory`"}
        problem = working_memory_problem(self.options, args["memory"])
        if problem is not None:
            return {"error": problem}
        await self.client.set_working_memory(self.thread_id, args["memory"], resource_id=self.resource_id)
        return {"success": True}

    async def answer(self, tool_call: Any) -> dict[str, Any]:
        """The `tool` message that answers one of the model's tool calls (litellm's object or its
        dict form)."""
        call = tool_call if isinstance(tool_call, dict) else tool_call.model_dump()
        function = call.get("function") or {}
        if function.get("name") != self.name:
            result: dict[str, Any] = {"error": f"unknown tool {function.get('name')!r}"}
        else:
            result = await self(function.get("arguments") or "{}")
        return {"role": "tool", "tool_call_id": call.get("id"), "content": json.dumps(result, ensure_ascii=False)}
