"""`om tail`: the lifecycle events of `<ns>.events` as they happen, one line each.

`follow` is the one reader of the event topic for people: `om tail` prints what it yields, and
`om demo` prints the demo's events through `tail`.  In a namespace with a key it opens each event
(`--json` prints it opened) and passes over those of a deleted memory.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, TextIO

from ..plural import plural
from .common import CommandMaker
from .namespaces import add_namespace_option, reading_settings, require_topic

if TYPE_CHECKING:
    from omstream.schemas.events import Event

    from ..settings import Settings

__all__ = ["add_commands", "describe_event", "follow", "tail"]


def describe_event(event: Event) -> str:
    from omstream.schemas import events as e

    kind = event.type.removeprefix("data-om-")
    head = f"{event.event_time:%H:%M:%S} {event.thread_id:<14} #{event.seq:<4} {kind:<20}"
    if isinstance(event, e.Status):
        d = event.data
        m, o = d.windows.active.messages, d.windows.active.observations
        return (f"{head} messages {m.tokens}/{m.threshold}  observations {o.tokens}/{o.threshold}  "
                f"gen {d.generation_count}")
    if isinstance(event, e.ObservationStart):
        return f"{head} {event.data.operation_type} of {plural(event.data.tokens_to_observe, 'token')}"
    if isinstance(event, e.ObservationEnd):
        d_end = event.data
        return (f"{head} {d_end.operation_type}: {plural(d_end.tokens_observed, 'token')} -> "
                f"{plural(d_end.observation_tokens, 'observation token')}")
    if isinstance(event, e.BufferingStart):
        return (f"{head} {event.data.operation_type} of {plural(event.data.tokens_to_buffer, 'token')}, "
                "in the background")
    if isinstance(event, e.BufferingEnd):
        d_buf = event.data
        return (f"{head} {d_buf.operation_type}: {plural(d_buf.tokens_buffered, 'token')} -> "
                f"{d_buf.buffered_tokens} buffered")
    if isinstance(event, e.Activation):
        d_act = event.data
        return (f"{head} {d_act.operation_type}: {plural(d_act.tokens_activated, 'token')} -> "
                f"{plural(d_act.observation_tokens, 'observation token')} ({d_act.triggered_by}, no model call)")
    if isinstance(event, (e.ObservationFailed, e.BufferingFailed)):
        return f"{head} {event.data.operation_type}: {event.data.error}"
    if isinstance(event, e.ThreadUpdate):
        return f"{head} title {event.data.old_title!r} -> {event.data.new_title!r}"
    if isinstance(event, e.MessageAccepted):
        message = event.data.message
        tokens = f", {plural(message.tokens.count, 'token')}" if message.tokens is not None else ""
        return f"{head} {message.role} message {message.id}{tokens}"
    if isinstance(event, e.InputHeld):
        what = (f" ({event.data.input_type}{' ' + event.data.message_id if event.data.message_id else ''})"
                if event.data.input_type else "")
        return f"{head} holding {plural(event.data.held, 'input')}{what} until cycle {_short(event.data.cycle_id)} ends"
    if isinstance(event, e.InputReleased):
        return f"{head} cycle {_short(event.data.cycle_id)} ended: {plural(event.data.released, 'held input')} applied"
    if isinstance(event, e.WorkingMemoryUpdated):
        document = event.data.working_memory
        size = plural(len(document), "character") if isinstance(document, str) else f"{len(document)} fields"
        return f"{head} the agent wrote the working memory ({size})"
    return f"{head} {event.data.model_dump_json(by_alias=True)[:120]}"


def _short(cycle_id: str | None) -> str:
    return (cycle_id or "?")[:8]


async def follow(settings: Settings, *, from_beginning: bool) -> AsyncGenerator[tuple[bytes, Event], None]:
    """The version's events, each with its bytes (opened), from the first or from now on, until
    the caller stops.  An event re-sent after a worker crash (a `seq` its memory had) comes once;
    one whose memory was deleted (its key shredded) does not come."""
    from aiokafka.errors import ConsumerStoppedError

    from omstream.crypto.opening import Opener
    from omstream.crypto.sealing import sealer_of
    from omstream.projections.follower import EventsFollower
    from omstream.schemas.codec import decode_event

    sealer = sealer_of(settings, repair=False)
    opener = Opener(sealer)
    # As the worker writes them (not only once committed): a re-sent event is dropped by its seq.
    follower = EventsFollower(settings, latest=not from_beginning, committed=False)
    last_seq: dict[str, int] = {}
    try:
        await sealer.start()
        await follower.start()
        while True:
            try:
                batch = await follower.read()
            except ConsumerStoppedError:
                return
            await opener.prepare(value for records in batch.values() for _, value, _ in records)
            for records in batch.values():
                for _, raw, _ in records:
                    value = opener.open(raw)
                    if value is None:
                        continue
                    event = decode_event(value)
                    if event.seq <= last_seq.get(event.memory_key, 0):
                        continue
                    last_seq[event.memory_key] = event.seq
                    yield value, event
    finally:
        await follower.stop()
        await sealer.stop()


async def tail(settings: Settings, *, thread: str | None, from_beginning: bool, as_json: bool,
               count: int | None, statuses: bool = True, messages: bool = True,
               out: TextIO = sys.stdout) -> int:
    """Print the events of `thread` (or of every thread), `count` of them or until cancelled;
    how many were printed."""
    seen = 0
    events = follow(settings, from_beginning=from_beginning)
    try:
        async for raw, event in events:
            if thread and event.thread_id != thread:
                continue
            if (not statuses and event.type == "data-om-status"
                    or not messages and event.type == "om-message-accepted"):
                continue
            print(raw.decode() if as_json else describe_event(event), file=out, flush=True)
            seen += 1
            if count is not None and seen >= count:
                break
    finally:
        await events.aclose()  # stops the consumer now, not whenever the generator is collected
    return seen


def cmd_tail(args: argparse.Namespace) -> int:
    from ..topics import Topics

    settings = reading_settings(args)
    # A consumer of a topic that does not exist waits for it forever, silently: refused first.
    topic = Topics.of(settings).events
    asyncio.run(require_topic(settings, topic, "tail"))
    if not args.from_beginning:  # after a finished demo nothing new may come: say what it waits for
        print(f"om tail: following {topic} from now on (--from-beginning for the events so far); Ctrl-C stops",
              file=sys.stderr, flush=True)
    try:
        asyncio.run(tail(settings, thread=args.thread, from_beginning=args.from_beginning,
                         as_json=args.json, count=args.count, statuses=not args.no_status,
                         messages=not args.no_messages))
    except KeyboardInterrupt:
        pass
    return 0


def add_commands(command: CommandMaker) -> None:
    p = command("tail", help="print lifecycle events as they happen",
                description="Print the lifecycle events of <ns>.events as they happen, one line each "
                "(Ctrl-C stops). The namespace: --namespace, else OM_NAMESPACE or omstream.namespace, "
                "else that of the om demo running on the same broker (said on stderr). A namespace "
                "without the topic is refused at once, naming the namespaces the broker has (exit 1).")
    add_namespace_option(p)
    p.add_argument("--thread", help="only this thread")
    p.add_argument("--from-beginning", action="store_true", help="start at the first event")
    p.add_argument("--json", action="store_true", help="print the raw JSON records")
    p.add_argument("--no-status", action="store_true", help="leave out data-om-status events")
    p.add_argument("--no-messages", action="store_true", help="leave out om-message-accepted events")
    p.add_argument("--count", type=int, help="stop after this many events")
    p.set_defaults(func=cmd_tail)
