"""An OpenAI Agents SDK agent whose memory is omstream: `Runner.run(..., session=OmSession(...))`.

Each turn is one `Runner.run` with the same `OmSession`: the SDK reads the session (a step, then
the thread's context window: the observations, then the messages not observed yet), runs the
agent on it and the user's message, and writes the run's items back as messages of the thread;
its final answer ends the turn.  `RunConfig(call_model_input_filter=session.model_input_filter)`
also gives every model call of a run's tool loop a step and the window after it, and
`session.recall_tool()` lets the model read the messages behind its observations.  After each
turn the example prints what the window held and the observations new since the last turn.

Needs a broker, a worker and `om serve` of the same configuration, e.g. offline:

    om broker start --config examples/agent.toml
    om worker --config examples/agent.toml &
    om serve --config examples/agent.toml &
    python examples/openai_agents_session.py --config examples/agent.toml          # offline
    python examples/openai_agents_session.py --config examples/agent.toml --model openai/gpt-4o-mini

The agent's model goes through the SDK's `LitellmModel` (`pip install 'openai-agents[litellm]'`
is not needed: omstream ships litellm): `scripted` is omstream's deterministic offline
`scripted/assistant` (it echoes the user and counts the observations it was given), any other
name a litellm model (its key in the environment).  The memory's Observer and Reflector are
the configuration's.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from agents import Agent, RunConfig, Runner

from omstream import OmClient, load_settings
from omstream.integrations.openai_agents import OmSession
from omstream.models.calls import warm_up

PROMPTS = [
    "Hi! I'm planning a cycling trip from Lyon to Avignon in May, about 250 km over four days.",
    "I ride a steel touring bike with panniers; my knees dislike long climbs above 8 percent.",
    "My partner Sam joins for the last two days, arriving by train in Valence on the Thursday.",
    "We'd like to camp two nights and stay in a guesthouse the other nights, budget 60 euros.",
    "Remind me: which day does Sam join, and where should we meet?",
]


async def converse(args: argparse.Namespace, prompts: list[str]) -> None:
    settings = load_settings(args.config)
    warm_up()  # litellm with omstream's offline providers (`scripted/...`, `local/...`)
    # Imported after omstream has loaded litellm, with its model table local: an import before it
    # would fetch that table from the network first (three warnings and 6 s when offline).
    from agents.extensions.models.litellm_model import LitellmModel

    name = "scripted/assistant" if args.model == "scripted" else args.model
    async with OmClient(settings) as om:
        session = OmSession(om, args.thread, resource_id=args.resource, base_url=args.url, wait=args.wait,
                            model=name)
        # The recall tool lets a model that calls tools read the messages behind its observations.
        agent = Agent(name="trip planner", instructions="You help the user plan cycling trips; be brief.",
                      model=LitellmModel(model=name), tools=[session.recall_tool()])
        config = RunConfig(tracing_disabled=True, call_model_input_filter=session.model_input_filter)
        shown: set[str] = set()  # observation lines printed already
        for turn, prompt in enumerate(prompts, start=1):
            result = await Runner.run(agent, prompt, session=session, run_config=config)
            window = session.last_window or {}
            observations = window.get("observations") or ""
            print(f"[turn {turn}] window: {len(window.get('observedMessageIds', []))} messages observed, "
                  f"{len(window.get('messages', []))} raw, {len(observations)} characters of observations",
                  flush=True)
            new = [line for line in observations.splitlines() if line not in shown]
            if new:  # the Observer (or the Reflector) ran since the last turn
                print("\n".join(f"    | {line}" for line in new), flush=True)
                shown.update(new)
            print(f"[turn {turn}] user: {prompt}\n[turn {turn}] {name}: {result.final_output}", flush=True)
        print(f"done: {len(prompts)} turns in thread {args.thread!r}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="omstream configuration file (default: $OM_CONFIG)")
    parser.add_argument("--model", default="scripted",
                        help="the agent's litellm model, or 'scripted' for the offline scripted one")
    parser.add_argument("--thread", default="agents-example", help="the thread (memory) to use")
    parser.add_argument("--resource", default="user-1", help="the user the thread belongs to")
    parser.add_argument("--prompts", type=Path, help="user messages, one a line (default: a short trip)")
    parser.add_argument("--url", help="om serve's address (default: the configuration's web_host:web_port)")
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the memory")
    args = parser.parse_args()
    prompts = ([line for line in args.prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
               if args.prompts else PROMPTS)
    if not prompts:
        parser.error(f"{args.prompts} holds no message")
    asyncio.run(converse(args, prompts))


if __name__ == "__main__":
    main()
