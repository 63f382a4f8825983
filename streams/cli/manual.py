"""`om observe`, `om reflect` and `om title`: commands to a thread's memory, through the log."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from .common import CommandError, CommandMaker, settings_of

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["add_commands", "unknown_thread"]


def cmd_manual(args: argparse.Namespace) -> int:
    """`om observe` / `om reflect` / `om title`: a command record on `<ns>.log`; the worker acts
    on it.

    Only for a thread the log knows: the worker would otherwise start an empty memory for a
    misspelt id, and the command would seem to do nothing."""
    from ..client import OmClient
    from ..client.om_client import known_thread

    settings = settings_of(args)
    if not asyncio.run(known_thread(settings, args.thread, args.resource)):
        raise CommandError(unknown_thread(settings, args.thread, args.resource))

    async def send() -> None:
        async with OmClient(settings) as client:
            if args.command == "observe":
                await client.observe(args.thread, resource_id=args.resource, request_id=args.request_id)
            elif args.command == "title":
                await client.set_title(args.thread, args.title, pinned=args.pin, resource_id=args.resource,
                                       request_id=args.request_id)
            else:
                await client.reflect(args.thread, prompt=args.prompt, resource_id=args.resource,
                                     request_id=args.request_id)

    asyncio.run(send())
    print(f"{args.command} requested for thread {args.thread}; follow it with `om tail`")
    return 0


def unknown_thread(settings: Settings, thread: str, resource: str | None) -> str:
    """Why a thread is unknown, and where to look."""
    reason = f"unknown thread {thread!r} in namespace {settings.namespace!r}: no message was sent to it"
    if settings.om.scope == "resource" and resource is None:
        return reason + " (in resource scope, name its resource with --resource)"
    return reason + " (check the id, and omstream.namespace / OM_NAMESPACE)"


def add_commands(command: CommandMaker) -> None:
    for name, text in (("observe", "observe a thread's unobserved messages now"),
                       ("reflect", "reflect a thread's observations now")):
        p = command(name, help=text)
        p.add_argument("thread", help="thread id")
        p.add_argument("--resource", help="resource id (needed in resource scope)")
        p.add_argument("--request-id", help="idempotency key: a command re-sent with it applies once")
        if name == "reflect":
            p.add_argument("--prompt", help="guidance for the reflector (SPECIFIC GUIDANCE)")
        p.set_defaults(func=cmd_manual)

    p = command("title", help="set a thread's title, or pin it against threadTitle retitling")
    p.add_argument("thread", help="thread id")
    p.add_argument("title", nargs="?", help="the new title (leave out to only pin or unpin)")
    pin = p.add_mutually_exclusive_group()
    pin.add_argument("--pin", dest="pin", action="store_const", const=True,
                     help="observer cycles keep this title")
    pin.add_argument("--unpin", dest="pin", action="store_const", const=False,
                     help="observer cycles may retitle the thread again")
    p.add_argument("--resource", help="resource id (needed in resource scope)")
    p.add_argument("--request-id", help="idempotency key: a command re-sent with it applies once")
    p.set_defaults(func=cmd_manual)
