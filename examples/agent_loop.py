"""An agent loop whose memory is omstream: read the context, call the model, write both sides.

Each turn the agent, through `ThreadMemory` (the protocol every framework adapter follows too)
  1. adds the user's message and marks step 0 of the turn (the step is where omstream checks
     its thresholds, so an observation or an activation can happen right there),
  2. reads its context window after that step: `om serve` answers once the fold's output for
     the step is in the projection, so the window holds the message just sent and every cycle
     the step triggered (read your own writes),
  3. calls its model through litellm with the window's ready-made `chat` (the observations as a
     system message, then the messages not yet observed) and the `recall` tool (`omstream.client.tools`),
     answering the model's recall calls through `om serve` until it replies,
  4. adds the reply and marks the turn's end.
Meanwhile a second task follows the memory's live feed (`GET /threads/{id}/events`, the same
frames a browser reads, see feed.js) and prints its lifecycle events as they happen.

Needs a broker, a worker and `om serve` of the same configuration, e.g. offline:

    om broker start --config examples/agent.toml
    om worker --config examples/agent.toml &
    om serve --config examples/agent.toml &
    python examples/agent_loop.py --config examples/agent.toml            # the scripted model
    python examples/agent_loop.py --config examples/agent.toml --model openai/gpt-4o-mini

The agent's model is any litellm model (its key in the environment); `scripted` is the
deterministic offline one the tests use, and `local/qwen2.5-1.5b` runs offline too (`om model
install`).  The memory's own Observer and Reflector are the configuration's.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from pathlib import Path
from typing import Any

from omstream import OmClient, ThreadMemory, load_settings
from omstream.client.feed_reader import FeedEvent
from omstream.client.thread_memory import MemoryNotReady
from omstream.client.tools import RecallTool
from omstream.models.calls import complete

MAX_TOOL_ROUNDS = 4  # recall calls answered per turn before the model must reply

PROMPTS = [
    "Hi! I'm planning a cycling trip from Lyon to Avignon in May, about 250 km over four days.",
    "I ride a steel touring bike with panniers; my knees dislike long climbs above 8 percent.",
    "My partner Sam joins for the last two days, arriving by train in Valence on the Thursday.",
    "We'd like to camp two nights and stay in a guesthouse the other nights, budget 60 euros.",
    "Remind me: which day does Sam join, and where should we meet?",
]


def describe(event: FeedEvent) -> str:
    """One line for a lifecycle event (`event.data` is the event's typed model)."""
    data = event.data
    if event.type == "data-om-status":
        active = data.windows.active
        return (f"status: messages {active.messages.tokens}/{active.messages.threshold} tokens, "
                f"observations {active.observations.tokens}/{active.observations.threshold}")
    if event.type == "om-message-accepted":
        return f"accepted {data.message.role} message {data.message.id}"
    if event.type.endswith("-start"):
        return f"{event.type} (cycle {event.id})"
    if event.type == "data-om-observation-end":
        return f"observed {data.tokens_observed} tokens into {data.observation_tokens} (cycle {event.id})"
    if event.type == "data-om-activation":
        return f"activated {data.chunks_activated} chunk(s), {data.tokens_activated} tokens (cycle {event.id})"
    return f"{event.type} {event.id}"


class Feed:
    """Follows the thread's feed, prints each event, and tells when a message was accepted."""

    def __init__(self, om: OmClient, thread: str, url: str | None) -> None:
        self.om, self.thread, self.url = om, thread, url
        self.accepted: set[str] = set()
        self.news = asyncio.Condition()

    async def follow(self) -> None:
        # From the thread's first event; after a dropped connection it resumes by itself.
        async for event in self.om.events(self.thread, base_url=self.url):
            print(f"  [feed {event.seq}] {describe(event)}", flush=True)
            if event.type == "om-message-accepted":
                async with self.news:
                    self.accepted.add(event.id)
                    self.news.notify_all()

    async def wait_for(self, message_id: str) -> None:
        async with self.news:
            await self.news.wait_for(lambda: message_id in self.accepted)


async def reply_to(model: str, chat: list[dict[str, Any]], recall: RecallTool, wait: float) -> str:
    """The model's reply, after answering the recall calls it makes (a model without tools, as
    the scripted one, just replies)."""
    for _ in range(MAX_TOOL_ROUNDS):
        answer = await complete(model, chat, timeout=wait, arguments={"tools": [recall.definition]})
        said = answer.choices[0].message
        if not said.tool_calls:
            return str(said.content or "")
        chat = [*chat, said.model_dump(exclude_none=True)]
        for call in said.tool_calls:
            result = await recall.answer(call)
            print(f"    recall {call.function.arguments} -> {len(result['content'])} characters", flush=True)
            chat.append(result)
    answer = await complete(model, chat, timeout=wait, arguments={})
    return str(answer.choices[0].message.content or "")


async def agent_loop(args: argparse.Namespace, prompts: list[str]) -> None:
    settings = load_settings(args.config)
    model = "scripted/assistant" if args.model == "scripted" else args.model
    run = uuid.uuid4().hex[:8]  # message ids are unique per thread: a run of its own
    async with OmClient(settings) as om:
        memory = ThreadMemory(om, args.thread, resource_id=args.resource, base_url=args.url, wait=args.wait)
        feed = Feed(om, args.thread, args.url)
        recall = memory.recall_tool()
        follower = asyncio.create_task(feed.follow())

        shown: set[str] = set()  # observation lines printed already
        for turn, prompt in enumerate(prompts, start=1):
            await memory.add([{"id": f"{run}-{turn}-user", "role": "user", "content": prompt}])
            try:
                window = await memory.step(model=model)
            except MemoryNotReady as exc:
                raise SystemExit(f"turn {turn}: {exc}") from None
            observations = window["observations"] or ""
            print(f"[turn {turn}] context: {len(window['observedMessageIds'])} messages observed, "
                  f"{len(window['messages'])} raw, {len(observations)} characters of observations",
                  flush=True)
            new = [line for line in observations.splitlines() if line not in shown]
            if new:  # the Observer (or the Reflector) ran since the last turn
                print("\n".join(f"    | {line}" for line in new), flush=True)
                shown.update(new)
            text = await reply_to(model, window["chat"], recall, args.wait)
            print(f"[turn {turn}] user: {prompt}\n[turn {turn}] {model}: {text}", flush=True)
            reply_id = f"{run}-{turn}-assistant"
            await memory.add([{"id": reply_id, "role": "assistant", "content": text}])
            await memory.end_turn()

        # The feed is caught up once it has shown the last reply; then stop following.
        caught_up = asyncio.create_task(feed.wait_for(reply_id))
        done, _ = await asyncio.wait([caught_up, follower], timeout=args.wait,
                                     return_when=asyncio.FIRST_COMPLETED)
        follower.cancel()
        caught_up.cancel()
        if follower in done:
            follower.result()  # the feed failed (FeedError): say why
        if caught_up not in done:
            raise SystemExit(f"the feed did not show the last reply within {args.wait} s")
        # What the tool answers a model that wants the conversation's first words back.
        first = await recall({"anchor": "start", "limit": 2})
        headers = [line for line in str(first.get("messages", first)).splitlines() if line.startswith("**")]
        print(f"[recall] {first.get('count', 0)} messages from the thread's start, the first "
              f"{headers[0] if headers else first}", flush=True)
        print(f"done: {len(prompts)} turns, {len(feed.accepted)} messages seen on the feed", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="omstream configuration file (default: $OM_CONFIG)")
    parser.add_argument("--model", default="scripted",
                        help="the agent's litellm model, or 'scripted' for the offline scripted one")
    parser.add_argument("--thread", default="agent-example", help="the thread (memory) to use")
    parser.add_argument("--resource", default="user-1", help="the user the thread belongs to")
    parser.add_argument("--prompts", type=Path, help="user messages, one a line (default: a short trip)")
    parser.add_argument("--url", help="om serve's address (default: the configuration's web_host:web_port)")
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the memory or the model")
    args = parser.parse_args()
    prompts = ([line for line in args.prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
               if args.prompts else PROMPTS)
    if not prompts:
        parser.error(f"{args.prompts} holds no message")
    asyncio.run(agent_loop(args, prompts))


if __name__ == "__main__":
    main()
