"""`om produce` and `om export`: conversation files into the log, and a thread's history out of it."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..plural import plural
from .common import EXIT_INPUT, CommandError, CommandMaker, settings_of, version_name
from .namespaces import add_namespace_option, reading_settings, require_topic

if TYPE_CHECKING:
    from omstream.schemas.messages import Message

    from ..settings import Settings

__all__ = ["add_commands", "produce_file"]


async def produce_file(settings: Settings, path: Path) -> tuple[int, int]:
    """Send a conversation file's records in order, each keyed by its memory key: (records,
    messages) sent."""
    from omstream.schemas.messages import Message

    from ..client import OmClient
    from ..conversations.files import read_conversation

    records = read_conversation(path)
    async with OmClient(settings) as client:
        run: list[Message] = []  # consecutive messages go in one batch, still in order
        for record in records:
            if isinstance(record, Message):
                run.append(record)
                continue
            await client.send_messages(run)
            run = []
            await client.send_control(record)
        await client.send_messages(run)
    return len(records), sum(isinstance(r, Message) for r in records)


def cmd_produce(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    try:
        records, messages = asyncio.run(produce_file(settings, Path(args.file)))
    except (ValueError, FileNotFoundError) as exc:
        raise CommandError(str(exc), EXIT_INPUT) from None
    others = records - messages
    also = f" and {plural(others, 'other record')}" if others else ""
    print(f"sent {plural(messages, 'message')}{also} to {settings.namespace}.log")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """A thread's history on stdout; a one-line summary on stderr."""
    from tqdm import tqdm

    from ..conversations.export import export
    from ..topics import Topics

    settings = reading_settings(args)
    if args.thread is None and (settings.om.scope != "resource" or args.resource is None):
        raise CommandError("name the thread with --thread (in resource scope, --resource alone exports the "
                           "resource's whole memory)", EXIT_INPUT)
    asyncio.run(require_topic(settings, Topics.of(settings).log, "export"))
    with tqdm(unit="rec", desc="reading the log", disable=None, leave=False, file=sys.stderr) as bar:
        def show(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        try:
            summary = asyncio.run(export(settings, thread=args.thread, resource=args.resource,
                                         version=args.version, out=sys.stdout.buffer, progress=show))
        except BrokenPipeError:
            # The reader stopped early (`| head`): no traceback, and none at exit's flush either.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    print(summary.line(), file=sys.stderr)
    if not summary.written:
        what = (f"thread {args.thread!r}" if args.thread else f"resource {args.resource!r}")
        raise CommandError(f"no records of {what} (memory key {summary.memory_key!r}) in {settings.namespace}.log; "
                           "check the id, --resource in resource scope, and omstream.namespace / OM_NAMESPACE",
                           EXIT_INPUT)
    return 0


def add_commands(command: CommandMaker) -> None:
    p = command("produce", help="send chat messages from a JSON-lines file")
    p.add_argument("file", help="one message per line: {threadId, role, content, createdAt, ...}; "
                   "or any input record of the log (a step, a turn end, a command), as om export writes")
    p.set_defaults(func=cmd_produce)

    p = command("export", help="a thread's (or a resource's) history in the log, as a conversation file "
                "for om simulate",
                description="Write a thread's retained input records of <ns>.log to stdout, in log "
                "order, one JSON line each in the log's wire format (messages, steps, turn ends, "
                "commands): the conversation format om simulate reads. Left out: records of other "
                "memories and threads, records that do not decode, model results, and records the "
                "worker refused (the version's dead-letter topic). In resource scope, --resource "
                "alone writes every thread of the resource's memory, in log order. A summary goes "
                "to stderr; exit status 2 when nothing of the thread is left.")
    p.add_argument("--thread", help="thread id")
    p.add_argument("--resource", help="resource id (needed in resource scope; alone, the resource's "
                   "whole memory)")
    p.add_argument("--version", type=version_name, help="the memory version whose dead letters "
                   "(refused records) are left out (default: omstream.version, normally live)")
    add_namespace_option(p)
    p.set_defaults(func=cmd_export)
