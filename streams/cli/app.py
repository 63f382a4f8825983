"""`om`'s parser and its one entry point, `main`.

Each command group's module adds its commands (`add_commands`); `main` runs the one asked for
and ends every failure the same way (`common.report`).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from . import broker, conversations, demo, dlq, manual, mcp, model, offline, repartition, servers, tail, versions
from .common import report

__all__ = ["build_parser", "main"]

CONFIG_HELP = "settings file (.toml, .yaml, .json); default $OM_CONFIG"
LOG_LEVELS = ["debug", "info", "warning", "error"]


def _global_options(*, config: bool = True) -> argparse.ArgumentParser:
    """The global options again, for after a command.  SUPPRESS: given only before the command,
    the top-level value stays (argparse copies every sub-parser default over it otherwise)."""
    common = argparse.ArgumentParser(add_help=False)
    if config:
        common.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
    common.add_argument("--log-level", default=argparse.SUPPRESS, choices=LOG_LEVELS)
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="om", description="omstream: Observational Memory on Kafka.")
    parser.add_argument("--config", help=CONFIG_HELP)
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common, no_config = _global_options(), _global_options(config=False)

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        # `om COMMAND --help` shows the description, not the one-line help `om --help` lists:
        # without one of its own, a command's --help says what it does in that line.
        kwargs.setdefault("description", _sentence(kwargs.get("help", "")))
        # simulate has a --config of its own (its options file), so only --log-level there.
        return commands.add_parser(name, parents=[no_config if name == "simulate" else common], **kwargs)

    # In the order `om --help` lists them.
    for group in (demo, model, broker, servers, mcp, conversations, manual, offline, versions, repartition, tail, dlq):
        group.add_commands(command)
    return parser


def _sentence(line: str) -> str:
    """A help line as the sentence that opens a command's --help: capitalised, with a full stop."""
    return f"{line[:1].upper()}{line[1:]}." if line else ""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    aiokafka_log = logging.getLogger("aiokafka")
    level = aiokafka_log.level
    if args.command not in servers.SERVERS and args.log_level != "debug":
        # A client's connection retries are aiokafka ERROR records; the command says what failed.
        aiokafka_log.setLevel(logging.CRITICAL)
    try:
        return int(args.func(args) or 0)
    except Exception as exc:
        status = report(args, exc)
        if status is None:
            raise
        return status
    finally:
        aiokafka_log.setLevel(level)
