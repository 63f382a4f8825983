"""`om worker` and `om serve`: the long-running processes, the fold and the read side."""

from __future__ import annotations

import argparse
import asyncio
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from .broker import create_topics
from .common import CommandMaker, port_number, settings_of

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["SERVERS", "add_commands", "default_version", "live_settings"]

# Commands that log like a server; the others are short clients that report their own errors.
SERVERS = {"worker", "serve"}


def live_settings(args: argparse.Namespace) -> Settings:
    """The settings of a long-running process (`om worker`, `om serve`).

    Both scopes run live: what the documentation rules out in resource scope (async buffering,
    spec §2) is refused when the configuration loads, with the option's path, so a worker never
    starts with it."""
    return settings_of(args)


def cmd_worker(args: argparse.Namespace) -> int:
    import faust

    from ..logs import logging_config
    from ..pipeline.signing import result_key
    from ..worker.app import build_app
    from ..worker.key_agreement import agree_on_result_key

    settings = live_settings(args)
    if args.role:
        settings = replace(settings, role=args.role)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(create_topics(settings))
    # Before joining the group: a worker whose key is not the namespace's would refuse the
    # others' model results, or have its own refused (`omstream.worker.key_agreement`).
    asyncio.run(agree_on_result_key(settings, result_key(settings.result_key, settings.data_dir),
                                    adopt=args.adopt_key))
    app = build_app(settings)
    worker = faust.Worker(app, loglevel=args.log_level, logging_config=logging_config(args.log_level.upper()))
    worker.execute_from_commandline()
    return 0


def default_version(settings: Settings) -> Settings:
    """The settings a reader serves: the version `om switch` chose, unless OM_VERSION says."""
    from ..settings import LIVE
    from ..versions import read_registry

    if settings.version != LIVE or "OM_VERSION" in os.environ:
        return settings
    try:
        return replace(settings, version=asyncio.run(read_registry(settings)).default)
    except Exception:  # noqa: BLE001 - no broker yet: the server reports that itself, after its port
        return settings


def cmd_serve(args: argparse.Namespace) -> int:
    from omstream.projections.http.access import token_table
    from omstream.projections.serve import serve

    from ..logs import setup_logging

    settings = live_settings(args)
    token_table(settings)  # no tokens off loopback: refused before the broker is asked anything
    settings = default_version(settings)
    setup_logging(args.log_level.upper())
    try:
        # Announced only once the port is bound and the feed reads the topics.
        asyncio.run(serve(settings, on_ready=lambda url: print(f"serving on {url}", flush=True)))
    except KeyboardInterrupt:
        pass
    return 0


def add_commands(command: CommandMaker) -> None:
    from ..settings import ROLES

    p = command("worker", help="run the Faust worker (fold and model agents)",
                description="Run the worker: the fold agent and the model agents, or one of them "
                            "(--role). Every worker of a namespace must sign model results with "
                            "the same key (OM_RESULT_KEY); one with another key does not start.")
    p.add_argument("--role", choices=ROLES, help="what this process runs: 'all' (default: "
                   "omstream.role / OM_ROLE, else all), 'fold' (the fold agent alone, no litellm) or "
                   "'models' (the model agents alone, no state)")
    p.add_argument("--adopt-key", action="store_true",
                   help="make this worker's result-signing key the namespace's (to change keys: "
                        "stop every worker first, then start the others with the new key)")
    p.set_defaults(func=cmd_worker)

    p = command("serve", help="serve context windows over HTTP",
                description="Serve the read side over HTTP on omstream.web_host:web_port. On an address "
                "that is not loopback it needs tokens (omstream.api_tokens / OM_API_TOKENS or "
                "omstream.api_tokens_file / OM_API_TOKENS_FILE); each token reads the resources it is "
                "granted, '*' all of them.")
    p.add_argument("--port", type=port_number, help="port (default: omstream.web_port)")
    p.set_defaults(func=cmd_serve)
