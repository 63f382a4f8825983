"""`om mcp`: an MCP server of a namespace's memories (`omstream.integrations.mcp`), over stdio
(what a desktop client spawns) or streamable HTTP."""

from __future__ import annotations

import argparse
import asyncio
import os

from .common import CommandError, CommandMaker, port_number, settings_of

__all__ = ["DEFAULT_PORT", "add_commands"]

#: The HTTP transport's port unless `--port` says: beside `om serve`'s default 8765, leaving
#: 8766 to a second `om serve` (docs/operations.md runs one there).
DEFAULT_PORT = 8767


def cmd_mcp(args: argparse.Namespace) -> int:
    from ..logs import setup_logging

    try:
        from omstream.integrations.mcp import run_http, run_stdio
    except ImportError as exc:
        raise CommandError(str(exc)) from None

    settings = settings_of(args)
    url = args.url or f"http://{settings.web_host}:{settings.web_port}"
    # Logs go to stderr, always: over stdio, stdout is the protocol's.
    setup_logging(args.log_level.upper())
    try:
        if args.transport == "stdio":
            asyncio.run(run_stdio(settings, url=url, token=os.environ.get("OMSTREAM_TOKEN") or None, wait=args.wait))
        else:
            host = args.host or settings.web_host
            asyncio.run(run_http(settings, url=url, host=host, port=args.listen_port, wait=args.wait,
                                 on_ready=lambda at: print(f"MCP on {at}", flush=True)))
    except KeyboardInterrupt:
        pass
    return 0


def add_commands(command: CommandMaker) -> None:
    p = command("mcp", help="serve the namespace's memories to MCP clients (tools and resources)",
                description="Serve the namespace's memories as an MCP server: tools context, recall, search and "
                "add_messages, and each thread's window and observations as resources. It reads from om serve "
                "(--url) and writes to Kafka, as an agent does. Over stdio (the default, what a desktop client "
                "spawns) it reads om serve with the token in OMSTREAM_TOKEN, if any; over HTTP each request shows its "
                "own, one of om serve's tokens (omstream.api_tokens), and om serve answers it by that token's "
                "grants. Needs the extra: pip install 'omstream[mcp]'.")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (default) or http (streamable HTTP, at /mcp)")
    p.add_argument("--host", help="HTTP: the address to listen on (default: omstream.web_host); one that is "
                   "not loopback needs tokens, as om serve does")
    p.add_argument("--port", dest="listen_port", metavar="PORT", type=port_number, default=DEFAULT_PORT,
                   help=f"HTTP: the port to listen on (default {DEFAULT_PORT})")
    p.add_argument("--url", help="om serve's address (default: http://omstream.web_host:web_port)")
    p.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                   help="seconds a read waits for the memory to show a write (default 30)")
    p.set_defaults(func=cmd_mcp)
