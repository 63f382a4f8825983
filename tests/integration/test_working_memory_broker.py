"""The agent keeps its working memory through omstream (`workingMemory.enabled`, agent-managed):
against the session's broker, a worker and `om serve`.

- A Pydantic AI agent, with the framework's own FunctionModel: on its first turn the model calls
  `updateWorkingMemory` (the adapter's tool); on its next turn the model's system prompt holds
  the document and the tool's instructions, and `om serve`'s context has it as `workingMemory`.
- `om mcp` over stdio, through the SDK's client: `update_working_memory` is listed, writes another
  thread's document, which its `context` then shows; a document that is not the template's
  markdown is refused by the tool's schema, with the reason, and changes nothing.
- The OpenAI Agents SDK's `Runner` with its own `ScriptedModel`, and a LangGraph
  `create_react_agent` with a recording chat model: each model calls the adapter's tool on its
  first turn and reads the document in its next input's system part.
- The events: one `om-working-memory-updated` per accepted write, none for the refused one.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("mcp")
pytest.importorskip("agents")
pytest.importorskip("langgraph")

from agents import Agent as AgentsAgent  # noqa: E402
from agents import RunConfig, Runner  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from omstream import OmClient  # noqa: E402
from omstream.integrations import langgraph as om_langgraph  # noqa: E402
from omstream.integrations.openai_agents import OmSession  # noqa: E402
from omstream.integrations.pydantic_ai import OmMemory  # noqa: E402
from tests.integration.options import om_options  # noqa: E402
from tests.integration.support import events, served  # noqa: E402
from tests.integration.test_langgraph_broker import RecordingChatModel  # noqa: E402

pytestmark = pytest.mark.integration

DOCUMENT = "# User Information\n- **First Name**: Ada\n- **Location**: Lyon\n- **Interests**: cycling"
OTHER = "# User Information\n- **First Name**: Sam\n- **Location**: Valence"


class Scripted:
    """The FunctionModel's function: turn 0 writes the working memory, then replies; every
    request's system prompt is recorded."""

    def __init__(self) -> None:
        self.systems: list[str] = []
        self.turn = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.systems.append("\n".join(p.content for m in messages for p in getattr(m, "parts", ())
                                      if isinstance(p, SystemPromptPart)))
        returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if self.turn == 0 and not returned:
            return ModelResponse(parts=[ToolCallPart("updateWorkingMemory", {"memory": DOCUMENT},
                                                     tool_call_id="call-wm")])
        return ModelResponse(parts=[TextPart(f"Noted (turn {self.turn}).")])


async def agent_turns(settings, url: str) -> tuple[Scripted, dict]:
    model = Scripted()
    async with OmClient(settings) as om:
        memory = OmMemory(om, "wm-agent", resource_id="ada", base_url=url, wait=60)
        tool = memory.working_memory_tool()
        assert tool is not None and tool.name == "updateWorkingMemory"
        agent = Agent(FunctionModel(model), system_prompt="You help plan cycling trips.",
                      capabilities=[memory.capability()], tools=[tool])
        for turn, prompt in enumerate(["I'm Ada, I live in Lyon and love cycling.", "Where do I live?"]):
            model.turn = turn
            result = await agent.run(prompt)
            await memory.record(result.new_messages())
        context = await om.context("wm-agent", wait=60, base_url=url)
    return model, context


async def over_mcp(env, url: str, log) -> tuple[list[str], dict, str]:
    command = [sys.executable, "-m", "omstream.cli", "--config", str(env.config), "mcp", "--url", url]
    params = StdioServerParameters(command=command[0], args=command[1:], env={"PYTHONUNBUFFERED": "1"})
    with open(log, "w") as errors:
        async with stdio_client(params, errlog=errors) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = [t.name for t in (await session.list_tools()).tools]
            added = await session.call_tool("add_messages", {"threadId": "wm-mcp", "resourceId": "sam", "messages": [
                {"role": "user", "content": "I'm Sam, from Valence."}]})
            assert not added.is_error, added.content
            written = await session.call_tool("update_working_memory", {"threadId": "wm-mcp", "resourceId": "sam",
                                                                        "memory": OTHER})
            assert not written.is_error, written.content
            refused = await session.call_tool("update_working_memory", {"threadId": "wm-mcp", "resourceId": "sam",
                                                                        "memory": {"name": "Sam"}})
            assert refused.is_error
            # The write's effect, read after a step (read-your-writes: the step comes after it on the log).
            stepped = await session.call_tool("add_messages", {"threadId": "wm-mcp", "resourceId": "sam", "messages": [
                {"role": "user", "content": "Thanks."}]})
            assert not stepped.is_error, stepped.content
            context = await session.call_tool("context", {"threadId": "wm-mcp"})
            assert not context.is_error, context.content
            return names, context.structured_content, refused.content[0].text


@pytest.fixture(scope="module")
def services(broker, tmp_path_factory):
    """One namespace that keeps a working memory for the agent, its worker and `om serve`."""
    options = om_options(observation={"messageTokens": 30_000, "bufferTokens": False}, workingMemory={"enabled": True})
    with served(broker, tmp_path_factory.mktemp("working-memory"), options) as both:
        yield both


def updates_of(env, thread: str) -> list:
    return [e.data.working_memory for e in asyncio.run(events(env.settings))
            if e.type == "om-working-memory-updated" and e.thread_id == thread]


def test_a_pydantic_ai_agent_and_an_mcp_client_keep_the_working_memory(services, tmp_path):
    env, server = services
    model, context = asyncio.run(agent_turns(env.settings, server.url))
    names, mcp_context, refusal = asyncio.run(over_mcp(env, server.url, tmp_path / "mcp.log"))

    # The first request had no document yet but the tool's instructions; the next turn's, the document.
    assert "`updateWorkingMemory` tool" in model.systems[0] and "Current working memory:\n(empty)" in model.systems[0]
    assert DOCUMENT in model.systems[-1] and "`updateWorkingMemory` tool" in model.systems[-1], model.systems[-1]
    assert context["workingMemory"] == DOCUMENT
    assert any(DOCUMENT in m["content"] for m in context["chat"] if m["role"] == "system")

    assert "update_working_memory" in names
    assert mcp_context["workingMemory"] == OTHER
    assert "memory: {'name': 'Sam'} is not of type 'string'" in refusal, refusal  # the tool's schema: markdown
    assert updates_of(env, "wm-agent") == [DOCUMENT] and updates_of(env, "wm-mcp") == [OTHER]


def test_an_openai_agents_runner_keeps_the_working_memory(services):
    env, server = services
    model = ScriptedModel()

    async def scenario() -> list:
        async with OmClient(env.settings) as om:
            session = OmSession(om, "wm-runner", resource_id="ada", base_url=server.url, wait=60)
            tool = session.working_memory_tool()
            assert tool is not None
            agent = AgentsAgent(name="planner", instructions="You help plan cycling trips.", model=model, tools=[tool])
            model.enqueue([function_call("updateWorkingMemory", {"memory": DOCUMENT}, call_id="call_wm",
                                         item_id="fc_wm")])
            model.enqueue([assistant_message("Noted.", item_id="msg_0")])
            model.enqueue([assistant_message("You live in Lyon.", item_id="msg_1")])
            config = RunConfig(tracing_disabled=True)
            await Runner.run(agent, "I'm Ada, I live in Lyon.", session=session, run_config=config)
            await Runner.run(agent, "Where do I live?", session=session, run_config=config)
        return list(model.calls[-1].input)

    given = asyncio.run(scenario())
    system = " ".join(str(item.get("content")) for item in given if item.get("role") in ("system", "developer"))
    assert DOCUMENT in system and "`updateWorkingMemory` tool" in system, given
    assert updates_of(env, "wm-runner") == [DOCUMENT]


class WritingChatModel(RecordingChatModel):
    """The recording model of the LangGraph test, which first writes the working memory."""

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        if not self.inputs:
            self.inputs.append(list(messages))
            call = {"name": "updateWorkingMemory", "args": {"memory": DOCUMENT}, "id": "call-wm", "type": "tool_call"}
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=[call]))])
        return super()._generate(messages, stop, run_manager, **kwargs)


def test_a_langgraph_agent_keeps_the_working_memory(services):
    env, server = services
    model = WritingChatModel()

    async def scenario() -> None:
        async with OmClient(env.settings) as om:
            memory = om_langgraph.OmMemory(om, "wm-graph", resource_id="ada", base_url=server.url, wait=60)
            tool = memory.working_memory_tool()
            assert tool is not None
            agent = create_react_agent(model, [tool], pre_model_hook=memory.pre_model_hook,
                                       checkpointer=InMemorySaver())
            config = {"configurable": {"thread_id": "wm-graph"}}
            for prompt in ("I'm Ada, I live in Lyon.", "Where do I live?"):
                state = await agent.ainvoke({"messages": [HumanMessage(content=prompt)]}, config)
                await memory.record(state["messages"])

    asyncio.run(scenario())
    system = "\n".join(m.text for m in model.inputs[-1] if m.type == "system")
    assert DOCUMENT in system and "`updateWorkingMemory` tool" in system, system
    assert updates_of(env, "wm-graph") == [DOCUMENT]
