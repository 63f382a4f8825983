"""`om simulate`, `om schema` and `om config`: the commands that need no broker."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import orjson

from ..plural import plural
from .common import EXIT_INPUT, CommandError, CommandMaker

__all__ = ["add_commands"]


def cmd_simulate(args: argparse.Namespace) -> int:
    from omstream.schemas.config import load_om_config

    from ..conversations.simulation import CycleCount, run
    from ..settings import SettingsError, file_problems, read_config_file

    # Its own --config (args.options) names the options; else the global one.  Their mistakes
    # are settings problems (exit 1); a bad conversation file is exit 2.
    options = args.options or args.config
    data = read_config_file(Path(options)) if options else True
    if file_problems(data):
        raise SettingsError(file_problems(data))
    om = load_om_config(data)
    try:
        summary = run(Path(args.conversation), om, out=args.out, parity=args.parity,
                      measured_time=args.measured_time, timeline=args.timeline)
    except (OSError, ValueError) as exc:
        raise CommandError(str(exc), EXIT_INPUT) from None
    print(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode(), file=sys.stderr)
    cycles = summary["cycles"]
    failed = CycleCount(cycles["started"], cycles["failed"], cycles.get("firstError")).failure_line()
    if failed is not None:  # the events are written all the same (--out): they say what failed
        raise CommandError(failed)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from omstream.schemas.jsonschema import export_schemas

    result = export_schemas(args.out, check=args.check)
    if args.check:
        if result.stale:
            for label, names in (("new", result.added), ("changed", result.changed), ("removed", result.removed)):
                for name in names:
                    print(f"  {label:<8} {name}", file=sys.stderr)
            print(f"{result.out} is stale: run `om schema export`", file=sys.stderr)
            return 1
        print(f"{result.out}: {plural(len(result.unchanged), 'file')} up to date")
        return 0
    for label, names in (("wrote", result.added), ("updated", result.changed), ("removed", result.removed)):
        for name in names:
            print(f"  {label:<8} {name}")
    print(f"{result.out}: {len(result.added)} new, {len(result.changed)} changed, "
          f"{len(result.removed)} removed, {len(result.unchanged)} unchanged")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """Exit 0 with the resolved options as JSON, or 1 with one `path: problem` line per error:
    of the file, its [omstream] table, its observationalMemory options and the OM_* variables.
    `reference` prints every key and option with its type, default and meaning (Markdown)."""
    if args.action == "reference":
        return _print_reference()
    from omstream.schemas.config import OmConfigError, load_om_config

    from ..engine.rules.resolution import resolve
    from ..settings import SettingsError, env_problems, file_problems, read_config_file

    path = args.file or args.config or os.environ.get("OM_CONFIG")
    if not path:
        raise CommandError("name a file (or use --config / $OM_CONFIG)")
    data = read_config_file(Path(path))
    problems = file_problems(data) + env_problems()
    try:
        om = load_om_config(data)
    except OmConfigError as exc:
        problems += exc.problems
    if problems:
        raise SettingsError(problems)
    print(orjson.dumps(resolve(om).to_json(), option=orjson.OPT_INDENT_2).decode())
    return 0


def _print_reference() -> int:
    from omstream.schemas.config.reference import render_reference

    from ..settings import ENV_PREFIX, Settings

    print(render_reference(Settings, env_prefix=ENV_PREFIX), end="")
    return 0


def add_commands(command: CommandMaker) -> None:
    p = command("simulate", help="run the engine over a conversation file, without a broker",
                description="Fold a conversation file with the worker's own engine and real model calls, "
                "without a broker: the summary (events, model calls, memories, cycles started and "
                "failed) goes to stderr. Exit status 1 when a model cycle failed (a missing API key, "
                "say), with how many of how many; 2 for a file that cannot be read. Try it: om "
                "simulate examples/demo-conversation.jsonl --config examples/simulate.toml --timeline")
    p.add_argument("conversation", help="JSON lines: {threadId, resourceId?, role, content, createdAt, id?} "
                   "messages (one user line = one turn), or a file of om export (its own steps and turn ends)")
    # Its own dest, so `om --config FILE simulate ...` keeps working too.
    p.add_argument("--config", dest="options", help="observationalMemory options (JSON, TOML or YAML)")
    p.add_argument("--out", type=Path, help="write every emitted event as JSON lines here")
    p.add_argument("--parity", action="store_true",
                   help="count with tokenx and render dates in UTC, like the original")
    p.add_argument("--timeline", action="store_true", help="print status and cycle lines")
    p.add_argument("--measured-time", action="store_true",
                   help="keep the model calls' measured durations (the log is then not reproducible)")
    p.set_defaults(func=cmd_simulate)

    p = command("schema", help="JSON Schema files of every wire type")
    p.add_argument("action", choices=["export"])
    p.add_argument("--out", type=Path, help="output directory (default: schemas/json/ of the repository)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the files differ")
    p.set_defaults(func=cmd_schema)

    p = command("config", help="check observationalMemory options and show the resolved values, "
                "or list every option")
    p.add_argument("action", choices=["check", "reference"], help="check: print the resolved options as "
                   "JSON (exit 0), or every error as `option: problem and fix` on stderr (exit 1); "
                   "reference: every [omstream] key and observationalMemory option with its type, default "
                   "and meaning, as Markdown (the manual's configuration reference)")
    p.add_argument("file", nargs="?", help="JSON, TOML or YAML: a settings file, "
                   "{observationalMemory: {...}}, the bare options, or true/false (default: --config)")
    p.set_defaults(func=cmd_config)
