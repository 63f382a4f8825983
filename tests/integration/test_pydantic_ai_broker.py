"""A Pydantic AI agent whose memory is omstream (omstream.integrations.pydantic_ai), against the
session's broker, a worker and `om serve`, with the framework's own FunctionModel as the agent's
model and the scripted Observer.

Turn by turn the agent runs with the history processor (a step per model request) and records
its new messages.  The evidence is what the FunctionModel received: after the observation, the
observation text in its system prompt and none of the observed messages among its messages; a
tool call and its result given back while unobserved; the recall tool answered; and the
thread's events show every message of every run exactly once.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from omstream import OmClient  # noqa: E402
from omstream.integrations.pydantic_ai import OmMemory  # noqa: E402
from tests.integration.options import om_options  # noqa: E402
from tests.integration.support import Server, events  # noqa: E402

pytestmark = pytest.mark.integration

PROMPTS = [
    "Hi! I'm planning a cycling trip from Lyon to Avignon in May, about 250 km over four days.",
    "What is the weather like in Valence this week? Use the weather tool.",
    "I ride a steel touring bike with panniers; my knees dislike long climbs above 8 percent.",
    "My partner Sam joins for the last two days, arriving by train in Valence on the Thursday.",
    "We'd like to camp two nights and stay in a guesthouse the other nights, budget 60 euros.",
    "Please recall how this conversation started.",
    "Which day does Sam join, and where should we meet?",
]
SYSTEM = "You help plan cycling trips."
WEATHER = "Sunny in Valence, 24 degrees, light mistral from the north."


def rendered(messages: list[ModelMessage]) -> list[tuple[str, str]]:
    """What the model was given, as (kind, text) entries, one per part."""
    out: list[tuple[str, str]] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                out.append(("system", part.content))
            elif isinstance(part, UserPromptPart):
                out.append(("user", str(part.content)))
            elif isinstance(part, ToolReturnPart):
                out.append((f"return {part.tool_call_id}", part.model_response_str()))
            elif isinstance(part, TextPart):
                out.append(("text", part.content))
            elif isinstance(part, ToolCallPart):
                out.append((f"call {part.tool_call_id}", f"{part.tool_name} {part.args_as_json_str()}"))
    return out


class Scripted:
    """The FunctionModel's function: records each request's messages; calls `weather` on
    turn 1 and `recall` on turn 5, else replies."""

    def __init__(self) -> None:
        self.received: list[list[tuple[str, str]]] = []
        self.turn = 0
        self.calls = {1: ToolCallPart("weather", {"city": "Valence"}, tool_call_id="call-weather"),
                      5: ToolCallPart("recall", {"anchor": "start", "limit": 2}, tool_call_id="call-recall")}
        self.called: set[int] = set()

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(rendered(messages))
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        # By the turn, not by the prompt: a step may observe the prompt just stored, and the
        # model then reads it in the observations only.
        # A step may observe the tool exchange as well: each tool is called once.
        if self.turn in self.calls and self.turn not in self.called:
            self.called.add(self.turn)
            return ModelResponse(parts=[self.calls[self.turn]])
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if self.turn in self.called:
            return ModelResponse(parts=[TextPart(f"The {self.calls[self.turn].tool_name} tool answered turn "
                                                 f"{self.turn}{'' if returns else ' (observed)'}.")])
        return ModelResponse(parts=[TextPart(f"Noted for turn {self.turn}, thank you.")])


def test_a_pydantic_ai_agent_gets_the_window_and_stores_each_message_once(new_env, tmp_path):
    env = new_env(options=om_options(observation={"messageTokens": 120, "bufferTokens": False},
                                     retrieval={"scope": "resource"}))
    env.start_worker()
    server = Server(env.settings, tmp_path / "serve.log")
    try:
        asyncio.run(server.ready())
        model, turns, recorded = asyncio.run(converse(env.settings, server.url))
        log = asyncio.run(events(env.settings))
    finally:
        server.stop()

    # Every message of every run is in the thread, exactly once.
    accepted = [e.data.message for e in log if e.type == "om-message-accepted"]
    ids = [m.id for m in accepted]
    assert len(ids) == len(set(ids)), ids
    replies = [f"Noted for turn {n}, thank you." for n in (0, 2, 3, 4, 6)]
    replies += ["The weather tool answered turn 1."]
    recall_reply = [m.content for m in accepted if str(m.content).startswith("The recall tool answered turn 5")]
    assert len(recall_reply) == 1, [m.content for m in accepted]
    for said in [*PROMPTS, *replies]:
        assert [m.content for m in accepted].count(said) == 1, (said, [m.content for m in accepted])
    parts = [p for m in accepted if not isinstance(m.content, str) for p in m.content]
    calls = [p for p in parts if p.type == "tool-call"]
    results = [p for p in parts if p.type == "tool-result"]
    assert [(p.tool_name, p.tool_call_id) for p in calls] == [("weather", "call-weather"), ("recall", "call-recall")]
    assert [(p.tool_name, p.tool_call_id) for p in results] == [("weather", "call-weather"), ("recall", "call-recall")]
    assert len(accepted) == len(PROMPTS) + len(replies) + 1 + 4  # the recall's reply, two calls, two results
    # record() stored what the processor had not: each run's final response
    assert [[type(m).__name__ for m in run][-1] for run in recorded] == ["ModelResponse"] * len(PROMPTS)

    # Every request: the agent's system prompt once (also when its request was observed), then
    # the window once.
    for given in model.received:
        assert [t for kind, t in given if kind == "system"].count(SYSTEM) == 1, given
        assert sum(t.startswith("<system-reminder>") for kind, t in given) <= 1, given

    # The weather call and its result, given back to the model at its next request (unobserved).
    after_weather = model.received[turns[1][0] + 1]
    assert ("call call-weather", 'weather {"city":"Valence"}') in after_weather
    assert ("return call-weather", WEATHER) in after_weather
    # The recall tool was called by the model and answered through om serve: the thread's start.
    answer = json.loads(results[1].result) if isinstance(results[1].result, str) else results[1].result
    assert answer["count"] == 2 and PROMPTS[0] in answer["messages"], answer
    # Its result reached the model unless the step after it observed the exchange.
    exchange = {m.id for m in accepted if not isinstance(m.content, str)
                and any(getattr(p, "tool_call_id", None) == "call-recall" for p in m.content)}
    after_recall = dict(model.received[turns[5][0] + 1])
    if exchange & set(turns[5][1]["observedMessageIds"]):
        assert "return call-recall" not in after_recall
    else:
        assert json.loads(after_recall["return call-recall"]) == answer

    # An observation happened; the turn after it got the observations and not the observed messages.
    observed_at = [i for i, (_, window) in enumerate(turns) if window["observedMessageIds"]]
    assert observed_at, [len(w["messages"]) for _, w in turns]
    turn = observed_at[0] + 1
    first_request, _ = turns[turn]
    given = model.received[first_request]
    system = "\n".join(t for kind, t in given if kind == "system")
    bullets = [line.strip() for line in turns[observed_at[0]][1]["observations"].splitlines()
               if line.strip().startswith("* ")]
    assert bullets and all(b in system for b in bullets), (bullets, system)
    by_id = {m.id: m for m in accepted}
    observed = [by_id[i] for i in turns[observed_at[0]][1]["observedMessageIds"]]
    assert len(observed) >= 4, observed
    shown = [t for kind, t in given if kind != "system"]  # the messages, the reminder
    for message in observed:
        said = [message.content] if isinstance(message.content, str) else [
            str(getattr(p, "text", None) or getattr(p, "result", None) or getattr(p, "tool_call_id", "")) for p in
            message.content]
        assert all(s and not any(s in entry for entry in shown) for s in said), (said, given)
    # The unobserved messages are given: this turn's prompt is the last user prompt.
    assert given[-1] == ("user", PROMPTS[turn])


async def converse(settings, url: str):
    """Run the conversation; per turn (index of its first model request, window after its last
    step: the memory observes at steps only)."""
    model = Scripted()

    async def weather(city: str) -> str:
        """Today's weather in a city."""
        return WEATHER

    turns, recorded = [], []
    async with OmClient(settings) as om:
        memory = OmMemory(om, "trip", resource_id="cyclist", base_url=url, wait=60)
        agent = Agent(FunctionModel(model), system_prompt=SYSTEM,
                      capabilities=[memory.capability()], tools=[weather, memory.recall_tool()])
        for number, prompt in enumerate(PROMPTS):
            model.turn = number
            first = len(model.received)
            result = await agent.run(prompt)
            recorded.append(await memory.record(result.new_messages()))
            turns.append((first, memory.window))  # the window after the turn's last step
    return model, turns, recorded


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pydantic_ai_agent.py"
MEMORY = re.compile(r"^\[turn (\d)\] memory: (\d+) messages observed, (\d+) unobserved, (\d+) characters")


def test_the_pydantic_ai_example_runs_against_the_local_services(new_env, tmp_path):
    # examples/agent.toml's memory options, on this run's namespace
    env = new_env(options=om_options(observation={"messageTokens": 150, "bufferTokens": False},
                                     retrieval={"scope": "resource"}))
    env.start_worker()
    server = Server(env.settings, tmp_path / "serve.log")
    try:
        asyncio.run(server.ready())
        run = subprocess.run([sys.executable, str(EXAMPLE), "--config", str(env.config), "--url", server.url,
                              "--wait", "60"], capture_output=True, text=True, timeout=240)
    finally:
        server.stop()
    print(run.stdout)
    assert run.returncode == 0, (run.stderr[-3000:], env.logs())
    memory = [tuple(map(int, m.groups())) for m in map(MEMORY.match, run.stdout.splitlines()) if m]
    assert [turn for turn, *_ in memory] == [1, 2, 3, 4, 5], run.stdout
    observed = [n for _, n, _, _ in memory]
    assert observed[0] == 0 and observed[-1] > 0 and observed == sorted(observed), memory
    assert "    call recall " in run.stdout and "    recall answered " in run.stdout
    assert f"(offline) recall answered: {PROMPTS[0]}" in run.stdout and "[turn 5] agent: (offline) I was given" not in run.stdout
    given = [int(n) for n in re.findall(r"agent: \(offline\) I was given (\d+) observation lines", run.stdout)]
    assert given[0] == 0 and given[-1] > 0, given  # the observations reached the model
    assert "User said: Hi! I'm planning a cycling trip" in run.stdout
