"""A LangGraph agent whose memory is omstream: `create_react_agent` with `OmMemory`'s pre-model hook.

Each turn the graph runs as LangGraph runs it (a checkpointer keeps the graph's state per
LangGraph thread); before every model call the hook stores the state's new messages in the
omstream thread, marks a step, and hands the model the thread's context window (observations,
then the messages not yet observed) instead of the whole history.  After the run, `record`
stores the final reply and marks the turn's end.  The agent has the `recall` tool: on the last
turn it reads the conversation's first messages back through `om serve`.

Offline by default: the model is LangChain's own `GenericFakeChatModel`, which answers from a
fixed list (so the conversation is the same on every run); the memory's Observer is the
configuration's (scripted in examples/agent.toml).  Needs a broker, a worker and `om serve`:

    om broker start --config examples/agent.toml
    om worker --config examples/agent.toml &
    om serve --config examples/agent.toml &
    python examples/langgraph_agent.py --config examples/agent.toml

`pip install 'omstream[langgraph]'` first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from typing import Any

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

from omstream import OmClient, load_settings
from omstream.integrations.langgraph import OmMemory

PROMPTS = [
    "Hi! I'm planning a cycling trip from Lyon to Avignon in May, about 250 km over four days.",
    "I ride a steel touring bike with panniers; my knees dislike long climbs above 8 percent.",
    "My partner Sam joins for the last two days, arriving by train in Valence on the Thursday.",
    "We'd like to camp two nights and stay in a guesthouse the other nights, budget 60 euros.",
    "Remind me: how did I start this conversation?",
]
# The fake model's answers, in order: one reply per turn, and on the last turn a recall call
# (the conversation's first two messages) followed by the reply that uses it.
REPLIES: list[AIMessage] = [
    AIMessage(content="Four days of about 60 km each along the Rhone works well."),
    AIMessage(content="Then the ViaRhona suits you: it stays flat along the river."),
    AIMessage(content="Valence on Thursday it is; the station is close to the route."),
    AIMessage(content="Campsites along the river cost about 15 euros a night."),
    AIMessage(content="", tool_calls=[{"name": "recall", "args": {"anchor": "start", "limit": 2},
                                       "id": "recall-1", "type": "tool_call"}]),
    AIMessage(content="You started with your Lyon to Avignon trip in May."),
]


def fake_model(tools: list[Any]) -> Any:
    """LangChain's test chat model, its tools bound as a provider would be told them
    (`GenericFakeChatModel` has no `bind_tools`; `create_react_agent` accepts a model whose
    tools are bound already)."""
    return GenericFakeChatModel(messages=iter(REPLIES)).bind(tools=[convert_to_openai_tool(t) for t in tools])


async def run(args: argparse.Namespace) -> None:
    settings = load_settings(args.config)
    thread = args.thread or f"langgraph-{uuid.uuid4().hex[:8]}"
    async with OmClient(settings) as om:
        memory = OmMemory(om, thread, resource_id=args.resource, base_url=args.url, wait=args.wait)
        tools = [memory.recall_tool()]
        agent = create_react_agent(fake_model(tools), tools, pre_model_hook=memory.pre_model_hook,
                                   checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": thread}}
        shown: set[str] = set()
        for turn, prompt in enumerate(PROMPTS, start=1):
            state = await agent.ainvoke({"messages": [HumanMessage(content=prompt)]}, config)
            await memory.record(state["messages"])
            window = memory.last_window or {}
            print(f"[turn {turn}] the model read {len(window.get('observedMessageIds', []))} messages as "
                  f"observations and {len(window.get('messages', []))} raw; the graph's state holds "
                  f"{len(state['messages'])}", flush=True)
            new = [line for line in (window.get("observations") or "").splitlines() if line not in shown]
            if new:  # the Observer ran since the last turn
                print("\n".join(f"    | {line}" for line in new), flush=True)
                shown.update(new)
            for message in state["messages"]:
                if message.type == "tool" and message.id not in shown:
                    answer = json.loads(message.text)  # what om serve answered the model's recall call
                    said = (repr(answer["error"]) if "error" in answer else
                            f"{answer.get('count', 0)} messages, {len(message.text)} characters")
                    print(f"    recall -> {said}", flush=True)
                    shown.add(message.id)
            print(f"[turn {turn}] user: {prompt}\n[turn {turn}] agent: {state['messages'][-1].text}", flush=True)
        print(f"done: {len(PROMPTS)} turns in thread {thread}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="omstream configuration file (default: $OM_CONFIG)")
    parser.add_argument("--thread", help="the omstream thread (default: a new one per run)")
    parser.add_argument("--resource", default="user-1", help="the user the thread belongs to")
    parser.add_argument("--url", help="om serve's address (default: the configuration's web_host:web_port)")
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the memory")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
