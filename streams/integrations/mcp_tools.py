"""What `om mcp`'s tools and resources do, apart from the MCP SDK (`omstream.integrations.mcp`
serves them): their input schemas, the check of a call's arguments, and the answers, read from
`om serve` and written to Kafka by an `OmClient`.

Access follows `om serve`'s rules because `om serve` applies them: every read (the context,
recall, search, and the thread's window `add_messages` reads before it writes) is made with the
token the caller showed `om mcp`, so `om serve` answers 401, 403 or 404 exactly as it would to
the caller itself.  The one thing `om serve` never sees is a write (it goes to Kafka), so the
write is checked here with the same table and the same rule (`Grant.may_read` of the resource
the messages name; none named: `*` only), after the read has shown that the thread, if it
exists, is the caller's.  Every refusal is a `BadCall`, which the server turns into an MCP
error result.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsonschema

from omstream.api_tokens import TokenTable
from omstream.client.thread_memory import ThreadMemory
from omstream.client.tools import recall_tool_definition
from omstream.client.working_memory_tool import WorkingMemoryTool, working_memory_tool_definition
from omstream.engine.rules.extraction import working_memory_schema
from omstream.engine.rules.resolution import ResolvedRetrieval, resolve
from omstream.projections.recall.params import RecallError
from omstream.schemas.config import OmConfig
from omstream.schemas.errors import OmError

if TYPE_CHECKING:
    from omstream.client.om_client import OmClient

__all__ = ["ADD_MESSAGES", "CONTEXT", "RECALL", "SEARCH", "WORKING_MEMORY", "BadCall", "MemoryTools", "ToolSpec",
           "checked", "tool_specs"]

CONTEXT, RECALL, SEARCH, ADD_MESSAGES = "context", "recall", "search", "add_messages"
WORKING_MEMORY = "update_working_memory"

_ID = {"type": "string", "minLength": 1}
_THREAD = {**_ID, "description": "The thread's id."}
_RESOURCE = {**_ID, "description": "The resource (user) the thread belongs to."}
_CHAT_MESSAGE = {
    "type": "object",
    "description": "A chat message in the OpenAI shape.",
    "properties": {
        "role": {"type": "string", "enum": ["user", "assistant", "system", "tool"]},
        "content": {"description": "Text, or a list of parts (text, image_url, file).",
                    "anyOf": [{"type": "string"}, {"type": "null"}, {"type": "array", "items": {"type": "object"}}]},
        "tool_calls": {"type": "array", "items": {"type": "object"},
                       "description": "An assistant's calls: {id, type: 'function', function: {name, arguments}}."},
        "tool_call_id": {"type": "string", "description": "A tool message: the id of the call it answers."},
        "id": {**_ID, "description": "The message's id; a message with an id the thread holds is not stored again."},
    },
    "required": ["role"],
}


class BadCall(OmError, ValueError):
    """A tool call or resource read refused: its arguments, its thread, or `om serve`'s answer."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool as MCP lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _recall_spec(retrieval: ResolvedRetrieval | None) -> ToolSpec:
    """The recall tool an agent of this configuration gets (`recall_tool_definition`), asked as
    `threadId`.  Its own `threadId` (resource scope: read another thread of the user) is that
    same argument here: an MCP caller names the thread to read, and may read any thread of the
    user by naming it, which is what recall's `threadId` would have done."""
    scope = retrieval.scope if retrieval is not None else "thread"
    function = recall_tool_definition(scope, search=retrieval is not None and retrieval.vector)["function"]
    schema = copy.deepcopy(function["parameters"])
    schema["properties"] = {"threadId": _THREAD, **{k: v for k, v in schema["properties"].items() if k != "threadId"}}
    schema["required"] = ["threadId"]
    return ToolSpec(RECALL, f"{function['description']} Asked as thread threadId.", schema)


def tool_specs(om: OmConfig) -> dict[str, ToolSpec]:
    """The tools, by name, for the memory options `om` (recall's schema follows `retrieval`)."""
    specs = [
        ToolSpec(CONTEXT, "The thread's context window: its observations, then the messages not yet observed "
                          "(also as ready-made chat messages, `chat`).",
                 _object({"threadId": _THREAD, "resourceId": {**_RESOURCE, "description": (
                     "The resource the thread should belong to: a thread whose unobserved messages name another is "
                     "refused.")}},
                     ["threadId"])),
        _recall_spec(resolve(om).retrieval),
        ToolSpec(SEARCH, "Search the observations by meaning (recall's search mode: needs retrieval.vector), "
                         "in the thread's scope: the thread, or every thread of its resource.",
                 _object({"threadId": _THREAD, "query": {**_ID, "description": "What to search for."},
                          "limit": {"type": "integer", "minimum": 1, "maximum": 50,
                                    "description": "Results, at most."}},
                         ["threadId", "query"])),
        ToolSpec(ADD_MESSAGES, "Append chat messages to the thread, each once (an id the thread holds is skipped), "
                               "then mark a step, where the memory checks its thresholds; returns the ids stored.",
                 _object({"threadId": _THREAD, "resourceId": _RESOURCE,
                          "messages": {"type": "array", "items": _CHAT_MESSAGE, "minItems": 1},
                          "step": {"type": "boolean", "default": True,
                                   "description": "Mark a step after the messages (default true)."},
                          "endTurn": {"type": "boolean", "default": False,
                                      "description": "Mark the turn's end after them (default false)."}},
                         ["threadId", "messages"])),
    ]
    if resolve(om).working_memory.agent_managed:
        function = working_memory_tool_definition(WORKING_MEMORY, working_memory_schema(om.working_memory))["function"]
        specs.append(ToolSpec(WORKING_MEMORY, function["description"] + " Written for thread threadId (its "
                              "resource's document in resource scope).",
                              _object({"threadId": _THREAD, "resourceId": _RESOURCE,
                                       "memory": function["parameters"]["properties"]["memory"]},
                                      ["threadId", "memory"])))
    return {spec.name: spec for spec in specs}


def checked(spec: ToolSpec, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments, if they fit the tool's input schema; `BadCall` naming the first that
    does not."""
    args = dict(arguments or {})
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(spec.input_schema).iter_errors(args))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise BadCall(f"{spec.name}: {where + ': ' if where else ''}{error.message}")
    return args


def _belongs(window: Mapping[str, Any], resource_id: str) -> bool:
    named = {m.get("resourceId") for m in window.get("messages", ())} - {None}
    return not named or named == {resource_id}


class MemoryTools:
    """The tools and resources over one `OmClient` (its producer shared by every caller); each
    call is made with the caller's token (None: the server has none)."""

    def __init__(self, client: OmClient, *, tokens: TokenTable | None, base_url: str | None = None,
                 wait: float = 30.0) -> None:
        self.client, self.tokens, self.base_url, self.wait = client, tokens, base_url, wait
        self.specs = tool_specs(client.settings.om)

    async def call(self, name: str, arguments: Mapping[str, Any] | None, token: str | None) -> dict[str, Any]:
        """The answer of tool `name`; `BadCall` for any refusal."""
        spec = self.specs.get(name)
        if spec is None:
            raise BadCall(f"no tool {name!r}: {', '.join(self.specs)}")
        args = checked(spec, arguments)
        try:
            answer: dict[str, Any] = await getattr(self, name)(self.client.with_token(token), **args)
        except BadCall:
            raise
        except (OmError, OSError) as exc:  # om serve's refusal or absence, a message that cannot be stored
            raise BadCall(_reason(exc)) from None
        return answer

    async def window(self, thread_id: str, token: str | None) -> dict[str, Any]:
        """The thread's window (the context resource)."""
        return await self.context(self.client.with_token(token), thread_id)

    # --- the tools --------------------------------------------------------------------------------
    async def context(self, client: OmClient, threadId: str, resourceId: str | None = None) -> dict[str, Any]:  # noqa: N803
        window = await client.context(threadId, wait=self.wait, base_url=self.base_url)
        if window is None:
            raise BadCall(f"unknown thread {threadId!r}")
        if resourceId is not None and not _belongs(window, resourceId):
            raise BadCall(f"thread {threadId!r} does not belong to resource {resourceId!r}")
        return window

    async def recall(self, client: OmClient, threadId: str, **params: Any) -> dict[str, Any]:  # noqa: N803
        try:
            answer = await client.recall(threadId, wait=self.wait, base_url=self.base_url, **params)
        except RecallError as exc:
            raise BadCall(f"recall: {exc}") from None
        if answer is None:
            raise BadCall(f"unknown thread {threadId!r}")
        return answer

    async def search(self, client: OmClient, threadId: str, query: str, limit: int | None = None) -> dict[str, Any]:  # noqa: N803
        return await self.recall(client, threadId, mode="search", query=query, limit=limit)

    async def add_messages(self, client: OmClient, threadId: str, messages: list[dict[str, Any]],  # noqa: N803
                           resourceId: str | None = None, step: bool = True,  # noqa: N803
                           endTurn: bool = False) -> dict[str, Any]:  # noqa: N803
        memory = ThreadMemory(client, threadId, resource_id=resourceId, base_url=self.base_url, wait=self.wait)
        # The read first: om serve refuses a thread of another resource to this token (403).
        await memory.known_ids()
        self._may_write(client, resourceId)
        stored = await memory.add(messages)
        ids = [m.id for m in stored]
        skipped = [str(m["id"]) for m in messages if m.get("id") is not None and str(m["id"]) not in ids]
        answer: dict[str, Any] = {"threadId": threadId, "ids": ids, "skipped": skipped}
        if step and stored:
            window = await memory.step()
            answer.update(observed=len(window["observedMessageIds"]), unobserved=len(window["messages"]))
        if endTurn:
            await memory.end_turn()
        return answer


    async def update_working_memory(self, client: OmClient, threadId: str, memory: Any,  # noqa: N803
                                    resourceId: str | None = None) -> dict[str, Any]:  # noqa: N803
        # The read first, as add_messages: om serve refuses a thread of another resource (403).
        await ThreadMemory(client, threadId, resource_id=resourceId, base_url=self.base_url,
                           wait=self.wait).known_ids()
        self._may_write(client, resourceId)
        answer = await WorkingMemoryTool(client, threadId, resource_id=resourceId)({"memory": memory})
        if "error" in answer:
            raise BadCall(f"{WORKING_MEMORY}: {answer['error']}")
        return {"threadId": threadId, **answer}

    def _may_write(self, client: OmClient, resource_id: str | None) -> None:
        """A write is the caller's when om serve would let it read the resource (`Grant.may_read`)."""
        if self.tokens is None:
            return
        grant = self.tokens.grant(client.token) if client.token else None
        if grant is None or not grant.may_read(resource_id):
            raise BadCall(f"this token may not write to resource {resource_id!r}" if grant is not None else
                          "unauthorized: no token, or one om serve's tokens do not hold")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, OmError):
        return f"om serve cannot be reached ({exc}): is it running, and is --url right?"
    return str(exc)
