"""A Pydantic AI agent whose memory is omstream (`omstream.integrations.pydantic_ai`).

Each turn is one `agent.run(prompt)` without `message_history`: the memory's history processor
stores the run's messages, marks a step before every model request and gives the model the
thread's context window (the observations, then the messages not yet observed); after the run,
`memory.record(result.new_messages())` stores the final answer and marks the turn's end.  The
agent has the `recall` tool, answered by `om serve`.

Needs a broker, a worker and `om serve` of the same configuration, e.g. offline:

    om broker start --config examples/agent.toml
    om worker --config examples/agent.toml &
    om serve --config examples/agent.toml &
    python examples/pydantic_ai_agent.py --config examples/agent.toml           # offline: FunctionModel
    python examples/pydantic_ai_agent.py --config examples/agent.toml --model openai:gpt-4o-mini

Offline, the agent's model is Pydantic AI's own `FunctionModel` with a function that says what
it was given (how many observation lines, how many messages) and, on the last turn, calls
`recall` for the thread's first messages; any Pydantic AI model name works instead (its key in
the environment).  The memory's Observer and Reflector are the configuration's (scripted in
examples/agent.toml, with a small threshold so that a few turns are enough to see an observation).
"""

from __future__ import annotations

import argparse
import asyncio
import re
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from omstream import OmClient, load_settings
from omstream.integrations.pydantic_ai import OmMemory

PROMPTS = [
    "Hi! I'm planning a cycling trip from Lyon to Avignon in May, about 250 km over four days.",
    "I ride a steel touring bike with panniers; my knees dislike long climbs above 8 percent.",
    "My partner Sam joins for the last two days, arriving by train in Valence on the Thursday.",
    "We'd like to camp two nights and stay in a guesthouse the other nights, budget 60 euros.",
    "Remind me: how did this conversation start?",
]


class Offline:
    """The offline model's function (for Pydantic AI's FunctionModel): it tells what it was
    given; when `recall` is set it first calls the recall tool, then quotes its answer."""

    def __init__(self) -> None:
        self.recall = False

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            answer = returns[0].content  # the recall tool's result: its `messages` are text
            text = str(answer.get("messages", answer)) if isinstance(answer, dict) else str(answer)
            lines = text.splitlines()  # a header per message ("**user (date)** [id]:"), then its text
            start = next((i for i, line in enumerate(lines) if line.startswith("**user")), len(lines))
            first = next((line for line in lines[start + 1:] if line.strip()), text[:200])
            first = re.sub(r"^\[p\d+\]\s*", "", first.strip())  # its parts are numbered: [p0] ...
            return ModelResponse(parts=[TextPart(f"(offline) recall answered: {first}")])
        if self.recall:
            self.recall = False
            return ModelResponse(parts=[ToolCallPart("recall", {"anchor": "start", "limit": 2})])
        system = "\n".join(p.content for m in messages for p in m.parts if isinstance(p, SystemPromptPart))
        bullets = sum(line.lstrip().startswith("* ") for line in system.splitlines())
        said = sum(isinstance(p, UserPromptPart | TextPart) for m in messages for p in m.parts)
        return ModelResponse(parts=[TextPart(f"(offline) I was given {bullets} observation lines and {said} "
                                             "messages.")])


def tool_lines(messages: list[ModelMessage]) -> list[str]:
    """The run's tool calls and what they answered, one line each."""
    lines = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart) and isinstance(message, ModelResponse):
                lines.append(f"    call {part.tool_name} {part.args_as_json_str()}")
            elif isinstance(part, ToolReturnPart):
                lines.append(f"    {part.tool_name} answered {len(part.model_response_str())} characters")
    return lines


async def converse(args: argparse.Namespace) -> None:
    settings = load_settings(args.config)
    offline = args.model == "offline"
    async with OmClient(settings) as om:
        memory = OmMemory(om, args.thread, resource_id=args.resource, base_url=args.url, wait=args.wait)
        offline_model = Offline()
        model: Any = FunctionModel(offline_model) if offline else args.model
        agent = Agent(model, instructions="You help plan cycling trips. Be brief.",
                      capabilities=[memory.capability()], tools=[memory.recall_tool()])
        for turn, prompt in enumerate(PROMPTS, start=1):
            offline_model.recall = turn == len(PROMPTS)
            result = await agent.run(prompt)
            await memory.record(result.new_messages())
            window = memory.window
            print(f"[turn {turn}] user: {prompt}", flush=True)
            print("\n".join(tool_lines(result.new_messages())) or "    (no tool call)", flush=True)
            print(f"[turn {turn}] agent: {result.output}", flush=True)
            # The window read at the run's last step (the last request and reply are stored after it).
            print(f"[turn {turn}] memory: {len(window['observedMessageIds'])} messages observed, "
                  f"{len(window['messages'])} unobserved, {len(window['observations'] or '')} characters "
                  "of observations", flush=True)
        lines = [line for line in (window["observations"] or "").splitlines() if line.lstrip().startswith("* ")]
        print("observations:\n" + "\n".join(f"    {line.strip()}" for line in lines), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="omstream configuration file (default: $OM_CONFIG)")
    parser.add_argument("--model", default="offline",
                        help="a Pydantic AI model name (e.g. openai:gpt-4o-mini), or 'offline' for a FunctionModel")
    parser.add_argument("--thread", default="pydantic-ai-example", help="the thread (memory) to use")
    parser.add_argument("--resource", default="user-1", help="the user the thread belongs to")
    parser.add_argument("--url", help="om serve's address (default: the configuration's web_host:web_port)")
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the memory")
    asyncio.run(converse(parser.parse_args()))


if __name__ == "__main__":
    main()
