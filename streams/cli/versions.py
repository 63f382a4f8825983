"""The version commands of `om`: replay, versions, diff, switch, drop.

    om replay --config NEW.toml --as NAME   fold the retained log into version NAME
    om versions                             every version with its figures
    om diff A B --thread T                  two versions' context windows of a thread
    om switch NAME                          the version readers serve by default
    om drop NAME                            delete a version's topics, group and state
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import shutil
import sys
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from ..plural import plural
from .common import EXIT_INPUT, EXIT_INTERRUPTED, CommandError, CommandMaker, settings_of, version_name

if TYPE_CHECKING:
    from ..replay.replay import ReplayProgress
    from ..settings import Settings

__all__ = ["add_commands"]


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO-8601 time (2026-11-01T00:00:00Z)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --- replay -----------------------------------------------------------------------------------
def cmd_replay(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..logs import setup_logging
    from ..replay.replay import replay
    from ..settings import LIVE

    if args.as_name == LIVE:
        raise CommandError("the live version is folded by `om worker`; replay as another name")
    setup_logging("WARNING")
    settings = settings_of(args, args.as_name)
    if args.threads:
        settings = replace(settings, only_threads=args.threads)
    if args.resources:
        if settings.om.scope != "resource":
            raise CommandError("--resources replays resource memories (scope 'resource'); in thread scope "
                               "name the threads with --threads")
        settings = replace(settings, only_resources=args.resources)
    bar = tqdm(unit="rec", disable=None, file=sys.stderr, dynamic_ncols=True)

    def show(f: ReplayProgress) -> None:
        bar.total = f.total
        bar.n = f.folded
        bar.set_postfix_str(f"memories={f.memories} calls={f.model_calls} hits={f.cache_hits} "
                            f"{f.records_per_s:.0f} rec/s eta={f.eta_s:.0f}s"
                            + (" caught up, following" if f.caught_up else ""), refresh=True)

    try:
        result = asyncio.run(replay(settings, mode=args.mode, exit_when_caught_up=args.exit_when_caught_up,
                                    start=args.start, bulk=not args.no_bulk, progress=show))
    except KeyboardInterrupt:
        bar.close()
        print(f"om replay: stopped; run the same command again to resume version {args.as_name!r}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        bar.close()
    print(orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2).decode())
    return 0


# --- versions ---------------------------------------------------------------------------------
async def _version_rows(settings: Settings) -> list[dict[str, Any]]:
    from ..replay.watch import Watch
    from ..versions import WorkerStats, read_registry, stats_path

    registry = await read_registry(settings)
    rows = []
    for name, info in sorted(registry.versions.items()):
        version = replace(settings, version=name)
        watch = Watch(version)
        await watch.start()
        try:
            p = await watch.positions()
        finally:
            await watch.stop()
        rows.append({"version": name, "default": name == registry.default, "digest": info.digest,
                     "foldMode": info.fold_mode, "lag": p.total - p.folded,
                     **WorkerStats.load(stats_path(version)).summary().to_json()})
    return rows


def cmd_versions(args: argparse.Namespace) -> int:
    rows = asyncio.run(_version_rows(settings_of(args)))
    if args.json:
        print(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return 0
    columns = ("version", "digest", "foldMode", "lag", "memories", "observationTokens", "generations",
               "modelCalls", "cacheHits", "costUsd")
    table = [[("* " if r["default"] else "  ") + r["version"], *(str(r[c]) for c in columns[1:])] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in table)) if table else len(c) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for row in table:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    return 0


# --- diff -------------------------------------------------------------------------------------
async def _context(settings: Settings, version: str, thread: str) -> tuple[list[str], bool]:
    """The thread's context window in a version, as text lines; and whether the thread exists."""
    from omstream.projections.feed import ProjectionFeed

    feed = ProjectionFeed(replace(settings, version=version))
    await feed.start()
    try:
        await feed.read_to_end()
    finally:
        await feed.stop()
    if thread not in feed.projection.threads:
        return [], False
    lines = []
    for message in feed.projection.window(thread).chat():
        content = message["content"]
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        lines += [f"[{message['role']}]", *text.splitlines()]
    return lines, True


def cmd_diff(args: argparse.Namespace) -> int:
    from omstream.engine.rules.tokens import get_counter

    settings = settings_of(args)
    (a, found_a), (b, found_b) = asyncio.run(_both(settings, args.a, args.b, args.thread))
    missing = [v for v, found in ((args.a, found_a), (args.b, found_b)) if not found]
    if missing:
        raise CommandError(f"thread {args.thread!r} has no events in {', '.join(missing)}", EXIT_INPUT)
    count = get_counter(settings.om.token_counter).count
    ta, tb = count("\n".join(a)), count("\n".join(b))
    if a == b:
        print(f"{args.a} and {args.b}: equal context windows of thread {args.thread} ({plural(ta, 'token')})")
        return 0
    print(f"{args.a}: {plural(ta, 'token')}, {args.b}: {plural(tb, 'token')}")
    if not args.unified:
        width = max(20, (shutil.get_terminal_size().columns - 3) // 2)
        for left, right in _pairs(a, b):
            mark = " " if left == right else "|"
            print(f"{left[:width]:<{width}} {mark} {right[:width]}")
    else:
        sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(
            a, b, fromfile=args.a, tofile=args.b, lineterm=""))
    return 1


async def _both(settings: Settings, a: str, b: str,
                thread: str) -> tuple[tuple[list[str], bool], tuple[list[str], bool]]:
    return await asyncio.gather(_context(settings, a, thread), _context(settings, b, thread))


def _pairs(a: list[str], b: list[str]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for _tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        left, right = a[i1:i2], b[j1:j2]
        for k in range(max(len(left), len(right))):
            pairs.append((left[k] if k < len(left) else "", right[k] if k < len(right) else ""))
    return pairs


# --- switch and drop --------------------------------------------------------------------------
def cmd_switch(args: argparse.Namespace) -> int:
    from ..settings import LIVE
    from ..versions import read_registry, set_default

    settings = settings_of(args)
    registry = asyncio.run(read_registry(settings))
    if args.name != LIVE and args.name not in registry.versions:
        raise CommandError(f"no version {args.name!r}; `om versions` lists them")
    asyncio.run(set_default(settings, args.name))
    print(f"readers now serve {args.name!r} by default (a reader started with OM_VERSION serves that one)")
    return 0


def cmd_drop(args: argparse.Namespace) -> int:
    from ..projections.store.store import store_dir
    from ..replay.drop import drop_version
    from ..settings import LIVE
    from ..versions import read_registry

    if args.name == LIVE:
        raise CommandError("the live version cannot be dropped")
    settings = settings_of(args, args.name)
    registry = asyncio.run(read_registry(settings))
    if args.name not in registry.versions:
        raise CommandError(f"no version {args.name!r}; `om versions` lists them")
    if registry.default == args.name:
        raise CommandError(f"{args.name!r} is the default version: `om switch` to another first")
    if not args.yes:
        answer = input(f"delete version {args.name!r}: its events, jobs, dead letters, state and group? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    gone = asyncio.run(drop_version(settings))
    shutil.rmtree(settings.data_dir / "worker" / settings.app_id, ignore_errors=True)
    # `om serve`'s read model of it too: a version made again under this name starts over.
    shutil.rmtree(store_dir(settings), ignore_errors=True)
    print(f"dropped {args.name!r}: {', '.join(gone) or 'no topics'}; its group and local state")
    return 0


def add_commands(command: CommandMaker) -> None:
    p = command("replay", help="fold the retained input log into a new memory version")
    p.add_argument("--as", dest="as_name", required=True, type=version_name, help="the version's name")
    p.add_argument("--mode", choices=["auto", "follow", "settled"], default="auto",
                   help="follow the log's recorded results (the live configuration) or settle every "
                   "job before the memory's next input (another configuration); auto chooses")
    p.add_argument("--threads", help="only these threads (ids separated by commas); default: every thread")
    p.add_argument("--resources", help="scope 'resource': only these resources' memories (ids separated by "
                   "commas); default: every resource")
    p.add_argument("--from", dest="start", type=_moment, metavar="TIME",
                   help="fold the log from this time on (ISO-8601, e.g. 2026-11-01T00:00:00Z): the "
                   "memories begin empty there; a resumed version keeps its position")
    p.add_argument("--exit-when-caught-up", action="store_true",
                   help="stop once the log is folded and every job answered (default: keep following)")
    p.add_argument("--no-bulk", action="store_true",
                   help="fold a new settled version through its worker from the start, not in bulk first")
    p.set_defaults(func=cmd_replay)

    p = command("versions", help="list memory versions: digest, lag, memories, model calls, cache hits")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_versions)

    p = command("diff", help="compare a thread's context window in two versions (exit 1 if they differ)")
    p.add_argument("a", type=version_name, help="a version")
    p.add_argument("b", type=version_name, help="another version")
    p.add_argument("--thread", required=True, help="thread id")
    p.add_argument("--unified", action="store_true", help="a unified diff instead of two columns")
    p.set_defaults(func=cmd_diff)

    p = command("switch", help="make a version the one readers serve by default")
    p.add_argument("name", type=version_name, help="version name")
    p.set_defaults(func=cmd_switch)

    p = command("drop", help="delete a version's topics, consumer group and state")
    p.add_argument("name", type=version_name, help="version name")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_drop)
