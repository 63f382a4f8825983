"""Tools an agent loop gives its model: `recall` (spec §12), answered by `om serve`.

    from omstream.client.tools import RecallTool

    tool = RecallTool(om, thread_id="t1")                 # om: an OmClient
    reply = await litellm.acompletion(model=..., messages=window["chat"], tools=[tool.definition])
    for call in reply.choices[0].message.tool_calls or []:
        messages.append(await tool.answer(call))          # {"role": "tool", "tool_call_id", "content"}

`definition` is an OpenAI-style function tool (litellm passes it to any provider that takes
tools); its parameters are the JSON schema of the tool's arguments, shaped by the scope (the
`threadId`, `before` and `after` arguments exist in resource scope only) and by whether search is
on, both read from the configuration's `retrieval` unless given.  `instructions` is the usage
guidance for the agent's prompt; the context window already carries it when the memory's
configuration has `retrieval` on.  A call the server refuses is
answered to the model as `{"error": reason}`, so it can correct itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from omstream.engine.rules.resolution import resolve
from omstream.projections.recall.instructions import recall_instructions
from omstream.projections.recall.params import PART_TYPES, RecallError

from .function_tool import FunctionTool

if TYPE_CHECKING:
    from .om_client import OmClient

__all__ = ["RECALL", "RecallTool", "recall_tool_definition"]

RECALL = "recall"


def _parameters(scope: str, search: bool) -> dict[str, Any]:
    modes = ["messages", "threads", *(["search"] if search else [])]
    properties: dict[str, Any] = {
        "mode": {"type": "string", "enum": modes,
                 "description": "messages (default): read messages; threads: "
                                + ("list the user's threads" if scope == "resource" else "this thread's id and title")
                                + ("; search: find messages by meaning" if search else "") + "."},
        "cursor": {"type": "string", "minLength": 1,
                   "description": "A message id to page from: the start or end id of an observation group's "
                                  "range (one id, not the range)."},
        "anchor": {"type": "string", "enum": ["start", "end"],
                   "description": "Without a cursor: read from the thread's start (default) or its end."},
        "page": {"type": "integer", "minimum": -50, "maximum": 50,
                 "description": "Messages: pages after the cursor (1, 2, ...) or before it (-1, -2, ...). "
                                "Threads: the page number, from 0."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Items per page (default 20)."},
        "detail": {"type": "string", "enum": ["low", "high"],
                   "description": "low (default): shortened parts and tool names; high: one part in full."},
        "partType": {"type": "string", "enum": list(PART_TYPES),
                     "description": "Messages: show only parts of this type."},
        "toolName": {"type": "string", "minLength": 1,
                     "description": "Messages: show only the calls and results of this tool."},
        "partIndex": {"type": "integer", "minimum": 0,
                      "description": "With a cursor: that message's part [pN] in full."},
        "charOffset": {"type": "integer", "minimum": 0,
                       "description": "With cursor and partIndex: go on reading a long part from the "
                                      "nextCharOffset a previous call returned."},
    }
    if search:
        properties["query"] = {"type": "string", "minLength": 1, "description": "What to search for (mode search)."}
    if scope == "resource":
        properties["threadId"] = {"type": "string", "minLength": 1,
                                  "description": "Read another thread of this user (ids from mode threads), "
                                                 "or \"current\"."}
        properties["before"] = {"type": "string",
                                "description": "Threads: created before this ISO 8601 date (e.g. 2026-03-15)."}
        properties["after"] = {"type": "string",
                               "description": "Threads: created after this ISO 8601 date (e.g. 2026-03-01)."}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def recall_tool_definition(scope: Literal["thread", "resource"] = "resource", *,
                           search: bool = False) -> dict[str, Any]:
    """The recall tool as an OpenAI-style function definition (what litellm's `tools=` takes)."""
    where = ("this user's conversation threads" if scope == "resource" else "this conversation thread")
    return {"type": "function", "function": {
        "name": RECALL,
        "description": (f"Read the original messages behind your observations, across {where}: page through "
                        "messages from a message id of an observation group's range, or from a thread's "
                        "start or end; list threads" + ("; search by meaning" if search else "") + "."),
        "parameters": _parameters(scope, search),
    }}


class RecallTool(FunctionTool):
    """The recall tool of one thread, answered through `om serve` by an `OmClient`."""

    def __init__(self, client: OmClient, thread_id: str, *, scope: Literal["thread", "resource"] | None = None,
                 search: bool | None = None, instructions: str | None = None, base_url: str | None = None) -> None:
        """`scope`, `search` and `instructions` default to the client's configuration: its
        `retrieval`'s scope, vector setting and instructions (without `retrieval`, the memory's
        scope, no search)."""
        self.client, self.thread_id, self.base_url = client, thread_id, base_url
        self.name = RECALL
        configured = resolve(client.settings.om).retrieval
        scope = scope or (configured.scope if configured is not None else client.settings.om.scope)
        search = search if search is not None else configured is not None and configured.vector
        if instructions is None and configured is not None:
            instructions = configured.instructions
        self.definition = recall_tool_definition(scope, search=search)
        self.instructions = recall_instructions(scope, search=search, custom=instructions)

    async def run(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = await self.client.recall(self.thread_id, base_url=self.base_url, **args)
        except RecallError as exc:
            return {"error": str(exc)}
        return answer if answer is not None else {"error": f"thread {self.thread_id} has no messages yet"}
