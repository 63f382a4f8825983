"""omstream as a LangGraph agent's memory: a pre-model hook that gives the model the thread's
context window, a store of the graph's messages into the thread, and `recall` as a LangChain tool.

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent
    from omstream.client import OmClient
    from omstream.integrations.langgraph import OmMemory

    async with OmClient(settings) as om:
        memory = OmMemory(om, "t1", resource_id="u1")
        agent = create_react_agent(model, [*tools, memory.recall_tool()],
                                   pre_model_hook=memory.pre_model_hook, checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t1"}}
        state = await agent.ainvoke({"messages": [("user", "Hi!")]}, config)
        await memory.record(state["messages"])            # the final reply, and the turn's end

The hook runs before every model call of the graph, the tool loop's included.  Each time it
stores the state's messages the thread does not hold yet (a LangChain message's id is its
message id, so each is stored once), marks a step (`ThreadMemory.step`, where omstream checks
its thresholds) and answers `{"llm_input_messages": window}`: the observations as a
`SystemMessage`, then the messages not yet observed.  That is what the model reads; the graph's
state keeps every message (LangGraph's `llm_input_messages` key, as its trimming and summarising
hooks use).  It is an async hook: run the graph with `ainvoke` / `astream`.

Turns: the step after a user message is step 0 of a new turn.  `record` stores the run's last
messages (the final reply, which no hook sees within its run) and marks the turn's end; when a
run was not recorded, the next run's first hook stores that reply and marks the missed turn end
there, after it, before the new user message.

Requires `pip install 'omstream[langgraph]'` (langgraph, langchain-core).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

try:
    from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
    from langchain_core.tools import StructuredTool
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError("omstream.integrations.langgraph needs LangGraph and LangChain: "
                      "pip install 'omstream[langgraph]'") from exc

from omstream.client.thread_memory import ThreadMemory

from .langgraph_messages import chats_from_langchain, langchain_from_chats

if TYPE_CHECKING:
    from omstream.client.om_client import OmClient
    from omstream.client.tools import RecallTool
    from omstream.client.working_memory_tool import WorkingMemoryTool

__all__ = ["OmMemory", "recall_tool"]


def _messages(state: Any) -> Sequence[BaseMessage]:
    """The state's messages: a dict state's `messages`, a pydantic state's attribute."""
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    if messages is None:
        raise ValueError("the graph's state has no `messages`: the hook reads the agent's message list")
    return list(messages)


class OmMemory:
    """One thread's memory for a LangGraph agent (see the module docstring).

    `model` names the agent's model on its steps (a change of model can activate buffered
    observations early); the other arguments are `ThreadMemory`'s (`memory` is that
    `ThreadMemory`).  `last_window` is the window the hook gave the model last (`observations`,
    `observedMessageIds`, `messages`, `chat`).  One `OmMemory` serves one conversation at a
    time: its steps and turn ends follow the runs in the order they call it.
    """

    def __init__(self, client: OmClient, thread_id: str, *, resource_id: str | None = None,
                 model: str | None = None, base_url: str | None = None, wait: float = 120.0) -> None:
        self.memory = ThreadMemory(client, thread_id, resource_id=resource_id, base_url=base_url, wait=wait)
        self.model = model
        self._in_turn = False  # a step was marked since the last turn end
        self.last_window: dict[str, Any] | None = None

    @property
    def thread_id(self) -> str:
        return self.memory.thread_id

    async def add(self, messages: Sequence[BaseMessage]) -> None:
        """Store the messages the thread does not hold yet (by id), in order."""
        await self.memory.add(chats_from_langchain(messages))

    async def pre_model_hook(self, state: Any) -> dict[str, list[AnyMessage]]:
        """LangGraph's pre-model hook: store, step, and give the model the window."""
        messages = _messages(state)
        if self._in_turn and messages and isinstance(messages[-1], HumanMessage):
            # A new user message while a turn is open: the last run was not recorded.  Its
            # messages (the final reply among them) end that turn before this one starts.
            start = len(messages)
            while start and isinstance(messages[start - 1], HumanMessage):
                start -= 1
            await self.add(messages[:start])
            await self.end_turn()
        await self.add(messages)
        window = await self.memory.step(model=self.model)
        self._in_turn, self.last_window = True, window
        return {"llm_input_messages": langchain_from_chats(window["chat"])}

    async def record(self, messages: Sequence[BaseMessage], *, end_turn: bool = True) -> None:
        """Store a run's messages the thread does not hold yet (the graph's state after the run:
        its final reply) and, unless `end_turn` is False, mark the turn's end."""
        await self.add(messages)
        if end_turn:
            await self.end_turn()

    async def end_turn(self) -> None:
        """Mark the turn's end after the last message stored."""
        await self.memory.end_turn()
        self._in_turn = False

    async def window(self) -> dict[str, Any]:
        """The thread's context window, as `om serve` shows it now (no step)."""
        return await self.memory.window()

    async def forget(self) -> None:
        """Delete the thread: its messages and its memory."""
        await self.memory.forget()
        self._in_turn = False

    def recall_tool(self) -> StructuredTool:
        """The thread's `recall` tool as a LangChain tool (see `recall_tool`)."""
        return recall_tool(self.memory)

    def working_memory_tool(self) -> StructuredTool | None:
        """The thread's `updateWorkingMemory` tool (`setWorkingMemory` with state signals) as a
        LangChain tool, or None when the configuration keeps no working memory for the agent to
        write (`omstream.client.working_memory_tool`)."""
        tool = self.memory.working_memory_tool()
        return None if tool is None else _structured(tool)


def recall_tool(memory: ThreadMemory) -> StructuredTool:
    """`ThreadMemory.recall_tool` as an async LangChain `StructuredTool`: its args schema is the
    recall tool's JSON schema, its answer the JSON text `RecallTool` gives (an `{"error": ...}`
    the model can correct itself from, for a call the server refuses)."""
    return _structured(memory.recall_tool())


def _structured(tool: RecallTool | WorkingMemoryTool) -> StructuredTool:
    function = tool.definition["function"]

    async def call(**arguments: Any) -> str:
        return json.dumps(await tool(arguments), ensure_ascii=False)

    return StructuredTool.from_function(coroutine=call, name=function["name"],
                                        description=function["description"], args_schema=function["parameters"])
