"""`OmSession`: an OpenAI Agents SDK session whose memory is an omstream thread.

    from agents import Agent, Runner
    from omstream.client import OmClient
    from omstream.integrations.openai_agents import OmSession

    async with OmClient(settings) as om:
        session = OmSession(om, "t1", resource_id="u1")
        result = await Runner.run(agent, "Hi!", session=session)

A thin adapter over `omstream.client.ThreadMemory`, in the SDK's terms:

* `add_items` stores the run's items (its input, the model's messages and function calls, the
  tools' outputs) as messages of the thread (`openai_agents_items.items_to_chat`; each id once).
  When the items end the turn (see below), it marks the turn's end.
* `get_items` is the history the SDK puts before the run's new input.  It marks a step when
  messages were added since the last one (that is where omstream checks its thresholds) and
  returns the context window read after it: the observations as system items, then the
  unobserved messages (tool calls as `function_call`, their results as `function_call_output`
  with the same `call_id`).  With a `limit`, the window's last `limit` items.
* The turn ends when `add_items` stores an assistant message as its last item while no
  function call of the session is left without its output: that is the SDK saving a run's
  final answer.  A run that ends otherwise (a tool's output as the final output, an interruption)
  leaves the turn open; `end_turn()` ends it by hand.
* `recall_tool()` is the thread's `recall` tool as an SDK function tool, for the agent's tools;
  `working_memory_tool()` its `updateWorkingMemory` tool, when the memory keeps a working memory
  for the agent.
* `pop_item` refuses (`ImmutableHistory`): the thread is an append-only log, a stored message
  cannot be taken back.  `clear_session` forgets the thread (`ThreadMemory.forget`).

The SDK reads the session once per run, before the first model call, and writes the run's
input before that call: so the window `get_items` gives is the one after the previous run, the
new input comes after it, and within the run's tool loop the model sees the SDK's own list (the
window plus the run's items) without a step between its calls.  For a step and a fresh window
before every model call, also pass `RunConfig(call_model_input_filter=session.model_input_filter)`:
it marks a step when the run stored messages since the last one and gives the model the window
read after it (the instructions stay the agent's).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

try:
    from agents.memory import SessionSettings
    from agents.run_config import CallModelData, ModelInputData
    from agents.tool import FunctionTool
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("omstream.integrations.openai_agents needs the OpenAI Agents SDK: "
                      "pip install 'omstream[agents]'") from exc

from omstream.client.thread_memory import ThreadMemory
from omstream.schemas.errors import OmError

from .openai_agents_items import UnsupportedItem, chat_to_items, items_to_chat

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

    from omstream.client.om_client import OmClient
    from omstream.client.tools import RecallTool
    from omstream.client.working_memory_tool import WorkingMemoryTool

__all__ = ["ImmutableHistory", "OmSession", "UnsupportedItem"]


class ImmutableHistory(OmError, NotImplementedError):
    """`pop_item` on an omstream thread: its messages are an append-only log."""


class OmSession:
    """An Agents SDK `Session` over one omstream thread (see the module docstring).

    `wait` is how long a read waits for `om serve` to show the thread after a step; `model`
    names the agent's model in the step records.
    """

    session_settings: SessionSettings | None = None

    def __init__(self, client: OmClient, thread_id: str, *, resource_id: str | None = None,
                 base_url: str | None = None, wait: float = 120.0, model: str | None = None) -> None:
        self.session_id = thread_id
        self.memory = ThreadMemory(client, thread_id, resource_id=resource_id, base_url=base_url, wait=wait)
        self.model = model
        #: The last window read (`ThreadMemory.window`'s dict): observations, observed ids, ...
        self.last_window: dict[str, Any] | None = None
        self._unstepped = False  # messages were added since the last step
        self._pending_calls: set[str] = set()  # call ids stored without their output yet

    # --- the SDK's session protocol -------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The thread's context window as input items (a step first, if messages were added)."""
        items: list[Any] = chat_to_items((await self._read())["chat"])
        if limit is None:
            return items
        return items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store the items as messages of the thread (each id once); end the turn when they end
        it (see the module docstring)."""
        chat = items_to_chat(items)
        sent = await self.memory.add(chat)
        for message in chat:
            for call in message.get("tool_calls") or ():
                self._pending_calls.add(str(call["id"]))
            if message["role"] == "tool":
                self._pending_calls.discard(str(message["tool_call_id"]))
        if not sent:
            return
        self._unstepped = True
        last = chat[-1]
        if (last["role"] == "assistant" and not last.get("tool_calls") and not self._pending_calls
                and sent[-1].id == last.get("id", sent[-1].id)):
            await self.end_turn()

    async def pop_item(self) -> TResponseInputItem | None:
        """Refused: a stored message cannot be taken back (`ImmutableHistory`)."""
        raise ImmutableHistory(f"thread {self.session_id!r} is an append-only log: a stored item cannot be "
                               f"popped (clear_session() forgets the whole thread)")

    async def clear_session(self) -> None:
        """Forget the thread: its messages and its memory."""
        await self.memory.forget()
        self._unstepped, self.last_window = False, None
        self._pending_calls.clear()

    # --- beyond the protocol --------------------------------------------------------------------
    async def end_turn(self) -> None:
        """Mark the turn's end after the last message stored."""
        await self.memory.end_turn()

    async def model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """A `RunConfig.call_model_input_filter`: before each model call of a run, a step (when
        messages were stored since the last one) and the window after it as the model's input."""
        if not self._unstepped:
            return data.model_data  # nothing new since the window the input was built from
        items: list[Any] = chat_to_items((await self._read())["chat"])
        return ModelInputData(input=items, instructions=data.model_data.instructions)

    def recall_tool(self) -> FunctionTool:
        """The thread's `recall` tool as a function tool of the SDK (`Agent(tools=[...])`): the
        model reads the messages behind its observations, answered by `om serve`
        (`omstream.client.tools.RecallTool`; a refused call is answered `{"error": reason}`)."""
        return _function_tool(self.memory.recall_tool())

    def working_memory_tool(self) -> FunctionTool | None:
        """The thread's `updateWorkingMemory` tool (`setWorkingMemory` with state signals) as a
        function tool of the SDK, or None when the configuration keeps no working memory for the
        agent to write (`omstream.client.working_memory_tool`)."""
        tool = self.memory.working_memory_tool()
        return None if tool is None else _function_tool(tool)

    async def _read(self) -> dict[str, Any]:
        if self._unstepped:
            window = await self.memory.step(model=self.model)
            self._unstepped = False
        else:
            window = await self.memory.window()
        self.last_window = window
        return window


def _function_tool(tool: RecallTool | WorkingMemoryTool) -> FunctionTool:
    """A client tool as a function tool of the SDK: its JSON schema, its answers as JSON text."""
    function = tool.definition["function"]

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        return json.dumps(await tool(arguments), ensure_ascii=False)

    return FunctionTool(name=function["name"], description=function["description"],
                        params_json_schema=function["parameters"], on_invoke_tool=invoke,
                        strict_json_schema=False)
