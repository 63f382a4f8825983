"""An MCP client of `om mcp`, with the official `mcp` SDK: what a desktop client does with the
memory's tools, in a script.

It spawns `om mcp --config CONFIG` over stdio (as a desktop client does: stdio means the client
starts the server), lists the tools, appends a few turns with `add_messages` until the memory has
observed, then reads the thread back with `context`, `recall` and the observations resource.
Needs a broker, a worker and `om serve` of the same configuration, e.g. offline:

    pip install 'omstream[mcp]'
    om broker start --config examples/agent.toml
    om worker --config examples/agent.toml &
    om serve --config examples/agent.toml &
    python examples/mcp_client.py --config examples/agent.toml

With tokens configured (`omstream.api_tokens`), set `OMSTREAM_TOKEN` to one of them: `om mcp` reads
`om serve` with it.  The memory's Observer is the configuration's (the scripted one here).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from typing import Any

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

TURNS = [
    ("Hi! I'm planning a cycling trip from Lyon to Avignon in May, about 250 km over four days.",
     "Lovely: the ViaRhona follows the Rhone nearly all the way."),
    ("I ride a steel touring bike with panniers; my knees dislike long climbs above 8 percent.",
     "Then stay on the river path; it is nearly flat."),
    ("My partner Sam joins for the last two days, arriving by train in Valence on the Thursday.",
     "Meet Sam at Valence station on Thursday morning."),
    ("We'd like to camp two nights and stay in a guesthouse the other nights, budget 60 euros.",
     "Campsites near Tournon, guesthouses in Orange: both fit."),
    ("Remind me: which day does Sam join, and where should we meet?",
     "Thursday, at Valence station."),
]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="the configuration om serve and the worker run with")
    p.add_argument("--thread", default=f"mcp-{uuid.uuid4().hex[:6]}", help="the thread (default: a new one)")
    p.add_argument("--resource", default="example-user", help="the thread's resource (user)")
    p.add_argument("--url", help="om serve's address (default: the configuration's)")
    return p.parse_args()


def text(result: Any) -> str:
    return result.content[0].text if result.content else ""


async def main() -> int:
    args = parse_args()
    command = [sys.executable, "-m", "omstream.cli", "--config", args.config, "mcp",
               *(["--url", args.url] if args.url else [])]
    # The SDK passes a small default environment to the server; ours goes on explicitly.
    env = {k: v for k, v in os.environ.items() if k.startswith(("OM_", "OMSTREAM_"))}
    server = StdioServerParameters(command=command[0], args=command[1:], env=env)
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        print("tools:", ", ".join(t.name for t in tools.tools))
        for k, (question, reply) in enumerate(TURNS, 1):
            result = await session.call_tool("add_messages", {
                "threadId": args.thread, "resourceId": args.resource,
                "messages": [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]})
            if result.is_error:
                print(f"[turn {k}] refused: {text(result)}")
                return 1
            stored = result.structured_content
            print(f"[turn {k}] stored {', '.join(stored['ids'])}: {stored['observed']} messages observed, "
                  f"{stored['unobserved']} not yet")
            if stored["observed"]:
                break
        window = (await session.call_tool("context", {"threadId": args.thread})).structured_content
        print(f"context: {len(window['observedMessageIds'])} messages observed, {len(window['messages'])} raw")
        observations = await session.read_resource(f"omstream://threads/{args.thread}/observations")
        for line in getattr(observations.contents[0], "text", "").splitlines():
            print("    |", line)
        recalled = await session.call_tool("recall", {"threadId": args.thread, "anchor": "start", "limit": 2})
        print("recall:", text(recalled)[:300])
        bad = await session.call_tool("recall", {"threadId": args.thread, "page": "two"})
        print(f"a malformed call: isError={bad.is_error}: {text(bad)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
