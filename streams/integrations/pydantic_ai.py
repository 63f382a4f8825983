"""omstream as a Pydantic AI agent's memory: a history processor that gives the model the thread's
context window, a recorder of each run's messages, and `recall` as a tool.

    from pydantic_ai import Agent
    from omstream import OmClient, load_settings
    from omstream.integrations.pydantic_ai import OmMemory

    async with OmClient(load_settings("om.toml")) as om:
        memory = OmMemory(om, "t1", resource_id="u1")
        agent = Agent(model, capabilities=[memory.capability()], tools=[memory.recall_tool()])
        result = await agent.run("Hi!")           # no message_history: the thread is the history
        await memory.record(result.new_messages())  # the run's messages not stored yet, then its end

Before every model request of a run (Pydantic AI's `ProcessHistory` capability; its history
processors take the run's whole history and their answer replaces it), `history_processor`

1. stores the run's messages that are not stored yet, but the request about to be sent — at the
   second request the user prompt and the model's tool calls, at the next ones the tool returns
   and the next calls — as messages of the thread (`ThreadMemory.add`);
2. marks a step (`ThreadMemory.step`): a step per model request, where omstream checks its
   thresholds, and reads the window after it (`window`);
3. answers the model's history: the agent's system prompts and the window's system messages
   (the observations), the window's unobserved messages from before this run, then this run's
   own messages as Pydantic AI made them, less those the memory has observed, ending with the
   request about to be sent (stored after the step: the model reads its newest input as it is,
   never only through an observation the step made of it).

The run's own messages are those stamped with the run's `run_id` (Pydantic AI stamps every
message of a run with it); everything else in the history — a `message_history` passed in, or the
window given at the previous request — is replaced by the window.  A message once stored is
replaced in the history by a copy that records its ids (`metadata["omstream"]`), so
`record(result.new_messages())` stores only what the processor has not (the last request and
the final response) and each message is stored exactly once; then it marks the turn's end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

try:
    from pydantic_ai import RunContext, Tool
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart
except ImportError as exc:  # pragma: no cover - the extra is installed wherever this is tested
    raise ImportError("omstream.integrations.pydantic_ai needs Pydantic AI: "
                      "pip install 'omstream[pydantic-ai]'") from exc

from omstream.client.thread_memory import ThreadMemory, empty_window
from omstream.projections.views.chat import chat_messages
from omstream.schemas.messages import Message

from .pydantic_ai_messages import MARK, chat_of, is_window, messages_of, stored_ids, with_ids, without_orphans

if TYPE_CHECKING:
    from omstream.client.om_client import OmClient
    from omstream.client.tools import RecallTool
    from omstream.client.working_memory_tool import WorkingMemoryTool

__all__ = ["OmMemory"]


class OmMemory:
    """One thread's memory for a Pydantic AI agent (see the module docstring).

    `client` is an open `OmClient`; `base_url` is `om serve`'s address (default: the
    configuration's); `wait` how long to wait for the memory after a step."""

    def __init__(self, client: OmClient, thread_id: str, *, resource_id: str | None = None,
                 base_url: str | None = None, wait: float = 120.0) -> None:
        self.thread = ThreadMemory(client, thread_id, resource_id=resource_id, base_url=base_url, wait=wait)
        # The agent's system prompts of the run in progress: Pydantic AI puts them in the run's
        # first request only, which the memory may observe; they are not stored.
        self._system: tuple[str | None, list[SystemPromptPart]] = (None, [])
        #: The context window read after the last step: what the model was given at the last
        #: model request (the thread's memory as of then).
        self.window: dict[str, Any] = empty_window(thread_id)

    # --- storing ----------------------------------------------------------------------------------
    async def _store(self, messages: Sequence[ModelMessage], *, in_place: bool = False) -> list[ModelMessage]:
        """`messages` with each one not stored yet stored, as its marked copy (`in_place`: marked
        itself, for a run that is over)."""
        out: list[ModelMessage] = []
        for message in messages:
            if stored_ids(message) is None and not is_window(message):
                sent = await self.thread.add(chat_of(message))
                marked = with_ids(message, [m.id for m in sent])
                if in_place:
                    message.metadata = marked.metadata
                else:
                    message = marked
            out.append(message)
        return out

    async def record(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        """Store the run's messages not stored yet (`result.new_messages()`: with the history
        processor, the last request and the final response; without it, the whole run) and mark
        the turn's end.  The run is over, so the messages stored now are marked themselves
        (`metadata["omstream"]`): recording them again stores nothing."""
        stored = await self._store(messages, in_place=True)
        await self.thread.end_turn()
        self._system = (None, [])
        return stored

    # --- the model's history ------------------------------------------------------------------------
    def _system_prompts(self, run_id: str | None, run: Sequence[ModelMessage]) -> list[SystemPromptPart]:
        if self._system[0] != run_id:
            self._system = (run_id, [])
        kept = self._system[1]
        for message in run:
            if isinstance(message, ModelRequest):
                kept.extend(p for p in message.parts if isinstance(p, SystemPromptPart) and p not in kept)
        return kept

    async def history_processor(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """Pydantic AI's history processor (with its `RunContext`): store, step, the window."""
        # Pydantic AI may stamp the run's id on a request of the window given at the previous
        # request (the one that records the step), so the window's mark decides first.
        run = [m for m in messages if m.run_id is not None and m.run_id == ctx.run_id and not is_window(m)]
        system = self._system_prompts(ctx.run_id, run)
        # The request about to be sent (the prompt, or the tool returns) is stored at the next
        # request or by `record`, after this step: the model reads its newest input as it is,
        # never only through an observation the step made of it.
        pending = run[-1:] if run and isinstance(run[-1], ModelRequest) else []
        done = await self._store(run[:len(run) - len(pending)])
        window = self.window = await self.thread.step(model=getattr(ctx.model, "model_name", None))
        ours = {i for m in done for i in stored_ids(m) or ()}
        raw = [Message.model_validate(m) for m in window["messages"]]
        head = window["chat"][:len(window["chat"]) - len(chat_messages(raw))]  # observations, reminder
        before = chat_messages([m for m in raw if m.id not in ours])  # earlier runs' unobserved messages
        observed = set(window["observedMessageIds"])
        unobserved = [_without_system(m) for m in [*done, *pending]
                      if not (ids := stored_ids(m) or []) or not set(ids) <= observed]
        lead = ModelRequest(parts=list(system), metadata={MARK: "window"})
        return [*([lead] if system else []), *messages_of([*head, *before]), *without_orphans(unobserved)]

    def capability(self) -> ProcessHistory[Any]:
        """The history processor as the capability an `Agent(capabilities=[...])` takes."""
        return ProcessHistory(self.history_processor)

    # --- recall ---------------------------------------------------------------------------------------
    def recall_tool(self) -> Tool[Any]:
        """The thread's `recall` tool as a Pydantic AI tool: its JSON schema is the recall
        tool's parameters, its answers `RecallTool`'s (a refused call answers `{"error": ...}`
        so the model can correct itself)."""
        return _as_tool(self.thread.recall_tool())

    def working_memory_tool(self) -> Tool[Any] | None:
        """The thread's `updateWorkingMemory` tool (`setWorkingMemory` with state signals) as a
        Pydantic AI tool, or None when the configuration keeps no working memory for the agent
        to write (`omstream.client.working_memory_tool`)."""
        tool = self.thread.working_memory_tool()
        return None if tool is None else _as_tool(tool)


def _as_tool(tool: RecallTool | WorkingMemoryTool) -> Tool[Any]:
    """A client tool as a Pydantic AI tool: its JSON schema, its answers (a refused call answers
    `{"error": ...}` so the model can correct itself)."""
    function = tool.definition["function"]

    async def answer(**arguments: Any) -> dict[str, Any]:
        return await tool(arguments)

    return Tool.from_schema(answer, name=function["name"], description=function["description"],
                            json_schema=function["parameters"])


def _without_system(message: ModelMessage) -> ModelMessage:
    """The run's own request without the agent's system prompts, which lead the history instead."""
    if isinstance(message, ModelRequest) and any(isinstance(p, SystemPromptPart) for p in message.parts):
        return dataclasses.replace(message, parts=[p for p in message.parts if not isinstance(p, SystemPromptPart)])
    return message
