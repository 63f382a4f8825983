"""omstream.integrations.langgraph end to end: a `create_react_agent` graph (checkpointed, one
LangGraph thread) whose pre-model hook is `OmMemory`, against the session's broker, a worker
and `om serve`, with the scripted Observer and a tiny threshold (issue 42, acceptance 1 and 2).

The evidence is what the graph's model received (a test chat model that records its inputs):
the model call after an observation reads the observations and none of the observed messages,
a tool call and its result reach the model's next call intact, and the thread's events accept
every message of the graph's state exactly once.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent
from pydantic import Field

from omstream.client import OmClient
from omstream.integrations.langgraph import OmMemory
from omstream.schemas.codec import decode_input
from omstream.schemas.control import TurnEnded
from omstream.topics import Topics
from tests.integration.options import om_options
from tests.integration.support import EventWatcher, events, read_all, served

pytestmark = pytest.mark.integration

EXAMPLE_TURN = re.compile(r"^\[turn (\d)\] the model read (\d+) messages as observations and (\d+) raw; "
                          r"the graph's state holds (\d+)$")

THREAD, RESOURCE = "lg-thread", "lg-user"
UNRECORDED = 2  # the turn (from 0) whose run is not recorded: the next run's hook stores its reply, ends it
PROMPTS = [
    "What is the weather in Valence on Thursday?",
    "I ride a steel touring bike with panniers and my knees dislike long climbs.",
    "My partner Sam joins for the last two days, arriving by train in Valence.",
    "We would like to camp two nights and stay in a guesthouse the other nights.",
    "Our budget is sixty euros a night and we prefer quiet riverside campsites.",
    "Remind me: which day does Sam join, and where should we meet?",
    "Thanks, and what should I pack for rain on the Rhone cycle path?",
]


class RecordingChatModel(BaseChatModel):
    """A chat model that records every input it receives and answers from a fixed rule: a
    question about the weather gets a `weather` tool call, a tool result a reply quoting it,
    anything else a reply numbered by the call."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "recording-test-model"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> RecordingChatModel:  # type: ignore[override]
        return self  # the rule above knows its one tool

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        self.inputs.append(list(messages))
        n, last = len(self.inputs), messages[-1]
        if isinstance(last, HumanMessage) and "weather" in last.text:
            reply = AIMessage(content="", tool_calls=[{"name": "weather", "args": {"city": "Valence", "day": "Thursday"},
                                                       "id": f"call-{n}", "type": "tool_call"}])
        elif isinstance(last, ToolMessage):
            reply = AIMessage(content=f"Reply {n}: the forecast says {last.text}.")
        else:
            reply = AIMessage(content=f"Reply {n}: noted, with {len(messages)} messages in view.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def weather(city: str, day: str) -> str:
    """The forecast for a city on a day."""
    return f"sunny in {city} on {day}, 24 degrees"


def _observations_text(messages: list[BaseMessage]) -> str:
    return "\n".join(m.text for m in messages if isinstance(m, SystemMessage))


async def _conversation(settings, url: str) -> dict[str, Any]:
    model = RecordingChatModel()
    async with OmClient(settings) as om:
        memory = OmMemory(om, THREAD, resource_id=RESOURCE, base_url=url, wait=60)
        agent = create_react_agent(model, [weather, memory.recall_tool()], pre_model_hook=memory.pre_model_hook,
                                   checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": THREAD}}
        turns: list[dict[str, Any]] = []  # per turn: the model calls it made, the window after its last step
        observed_at: int | None = None
        for turn, prompt in enumerate(PROMPTS):
            first_call = len(model.inputs)
            state = await agent.ainvoke({"messages": [HumanMessage(content=prompt)]}, config)
            window = memory.last_window
            assert window is not None
            turns.append({"calls": model.inputs[first_call:], "window": window})
            if turn != UNRECORDED:
                await memory.record(state["messages"])
            if observed_at is None and window["observedMessageIds"]:
                observed_at = turn
            elif observed_at is not None and turn > max(observed_at, UNRECORDED):
                break
        messages = (await agent.aget_state(config)).values["messages"]
    # Evidence, not a pause: the fold accepted every message of the graph's state.
    async with EventWatcher(settings) as watcher:
        expected = {m.id for m in messages}
        await watcher.wait_for(lambda evs: expected <= {e.data.message.id for e in evs
                                                        if e.type == "om-message-accepted"}, timeout=60)
    return {"turns": turns, "observed_at": observed_at, "messages": messages}


@pytest.fixture(scope="module")
def services(broker, tmp_path_factory):
    """One namespace, a worker and `om serve` for this module's tests (each its own thread), with
    examples/agent.toml's memory options: the scripted Observer, synchronous at 150 tokens."""
    options = om_options(observation={"messageTokens": 150, "bufferTokens": False}, retrieval={"scope": "resource"})
    with served(broker, tmp_path_factory.mktemp("langgraph"), options) as both:
        yield both


def test_a_react_agent_reads_the_window_and_stores_each_message_once(services):
    env, server = services
    run = asyncio.run(asyncio.wait_for(_conversation(env.settings, server.url), 90))
    accepted = [e.data.message for e in asyncio.run(events(env.settings)) if e.type == "om-message-accepted"]
    inputs = [decode_input(r.value) for r in asyncio.run(read_all(env.settings, Topics(env.settings.namespace).log,
                                                                  idle=0.3))]
    turn_ends = [r.after_message_id for r in inputs if isinstance(r, TurnEnded) and r.thread_id == THREAD]
    turns, observed_at, messages = run["turns"], run["observed_at"], run["messages"]
    print(f"turns {len(turns)}, observation at turn {observed_at + 1 if observed_at is not None else None}, "
          f"state messages {len(messages)}, model calls {sum(len(t['calls']) for t in turns)}, "
          f"observed when the next turn's model was called {len(turns[-1]['window']['observedMessageIds'])}, "
          f"turn ends {len(turn_ends)}")
    assert observed_at is not None, "no observation within the prompts"

    # The tool call and its result reach the model's next call intact (turn 1's second call).
    call, answer = turns[0]["calls"][1][-2:]
    assert isinstance(call, AIMessage) and call.tool_calls == [
        {"name": "weather", "args": {"city": "Valence", "day": "Thursday"}, "id": "call-1", "type": "tool_call"}]
    assert isinstance(answer, ToolMessage) and answer.tool_call_id == "call-1"
    assert answer.text == "sunny in Valence on Thursday, 24 degrees"
    assert "forecast says sunny in Valence" in messages[3].text  # the final reply of turn 1

    # The turn after the observation: the model reads the observations, not the observed messages.
    after = turns[observed_at + 1]
    window = after["window"]
    by_id = {m.id: m for m in messages}
    observed_texts = {by_id[i].text for i in window["observedMessageIds"] if by_id[i].text}
    assert observed_texts, window["observedMessageIds"]
    # The scripted Observer writes one `said:` line per message, its words kept.
    said = [line.split("said: ", 1)[1].strip() for line in window["observations"].splitlines() if "said: " in line]
    assert said and any("Valence" in text for text in said), window["observations"]
    for received in after["calls"]:
        system = _observations_text(received)
        assert "<observations>" in system and all(text in system for text in said), (said, system)
        shown = [m.text for m in received if not isinstance(m, SystemMessage)]
        assert not observed_texts & set(shown), observed_texts & set(shown)
        assert not any(text in m for text in said for m in shown)
    # ... while the graph's state keeps the whole conversation.
    assert {m.id for m in messages} >= set(window["observedMessageIds"])

    # Every message of the graph's state accepted once, nothing else.
    counts = Counter(m.id for m in accepted if m.thread_id == THREAD)
    assert counts == Counter(m.id for m in messages), counts
    stored = {m.id: m for m in accepted}
    # A turn end after each turn's final reply; the unrecorded turn's marked by the next run's hook.
    replies = [i for i, m in enumerate(messages) if isinstance(m, AIMessage) and not m.tool_calls]
    assert turn_ends == [messages[i].id for i in replies], (turn_ends, replies)
    tool_call_part = stored[messages[1].id].content[0]
    assert tool_call_part.tool_name == "weather" and tool_call_part.args == {"city": "Valence", "day": "Thursday"}
    assert stored[messages[2].id].content[0].tool_call_id == "call-1"


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_agent.py"


def test_the_langgraph_example_runs_against_the_local_services(services):
    """examples/langgraph_agent.py as a user runs it (its own process, LangChain's fake model, a
    thread of its own): the observations reach the model, recall answers."""
    env, server = services
    run = subprocess.run([sys.executable, str(EXAMPLE), "--config", str(env.config), "--url", server.url,
                          "--wait", "60"], capture_output=True, text=True, timeout=180)
    print(run.stdout)
    assert run.returncode == 0, (run.stderr[-3000:], env.logs())
    read = [tuple(map(int, m.groups())) for m in map(EXAMPLE_TURN.match, run.stdout.splitlines()) if m]
    assert [turn for turn, *_ in read] == [1, 2, 3, 4, 5], run.stdout
    assert read[0][1] == 0 and read[-1][1] > 0, read  # observed messages, none at first, some at the end
    assert [state for *_, state in read] == [2, 4, 6, 8, 12], read  # the graph's state keeps everything
    assert "    | " in run.stdout and "Avignon" in run.stdout
    assert re.search(r"^    recall -> 2 messages, \d+ characters$", run.stdout, re.M), run.stdout
    assert "done: 5 turns" in run.stdout
