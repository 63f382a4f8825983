"""What the client's tools share: a function tool an agent loop hands its model, and the `tool`
message that answers each of the model's calls to it.

`RecallTool` (`omstream.client.tools`) and `WorkingMemoryTool`
(`omstream.client.working_memory_tool`) set `name` and `definition` and say what a call does
(`run`); this class reads the model's arguments and writes its answer, so a malformed call is
answered `{"error": reason}`, never raised: the model can correct itself.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["FunctionTool"]


class FunctionTool:
    """An OpenAI-style function tool (`definition`, named `name`) answered by `run`."""

    name: str
    definition: dict[str, Any]

    async def run(self, args: dict[str, Any]) -> dict[str, Any]:
        """The tool's result for a call's arguments (a JSON object)."""
        raise NotImplementedError

    async def __call__(self, arguments: str | dict[str, Any]) -> dict[str, Any]:
        """The tool's result for the model's arguments (a JSON object, or its text)."""
        try:
            args = json.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments)
        except json.JSONDecodeError as exc:
            return {"error": f"the arguments are not a JSON object: {exc}"}
        if not isinstance(args, dict):
            return {"error": "the arguments must be a JSON object"}
        return await self.run(args)

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
