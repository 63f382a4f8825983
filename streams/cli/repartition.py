"""`om repartition`: the namespace's input log copied into a new namespace with more (or fewer)
partitions, to fold there and switch to (docs/operations.md, "Growing the partition count").

    om repartition --to NEW --partitions M [--exit-when-caught-up]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING

import orjson

from .common import EXIT_INTERRUPTED, CommandMaker, settings_of

if TYPE_CHECKING:
    from ..repartition import RepartitionProgress

__all__ = ["add_commands"]


def _namespace(text: str) -> str:
    from ..settings import NAMESPACE_NAME

    if not NAMESPACE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"use letters, digits, '.', '_' or '-' (it prefixes every topic name), "
                                         f"got {text!r}")
    return text


def _partitions(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a partition count of 1 or more, got {text!r}")
    return int(text)


def cmd_repartition(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..logs import setup_logging
    from ..repartition import repartition

    setup_logging(args.log_level.upper())
    settings = settings_of(args)
    bar = tqdm(unit="rec", disable=None, file=sys.stderr, dynamic_ncols=True)
    last: list[RepartitionProgress] = []

    def show(f: RepartitionProgress) -> None:
        last[:] = [f]
        bar.total, bar.n = f.total, f.position
        bar.set_postfix_str(f"copied={f.copied} skipped={f.skipped} cache={f.cache_copied} "
                            f"{f.records_per_s:.0f} rec/s" + (" caught up, following" if f.caught_up else ""),
                            refresh=True)

    async def copy() -> tuple[RepartitionProgress, bool]:
        # Ctrl-C asks the copy to stop at its next fetch (it marks what it sent, then returns);
        # a second one cancels it at once.
        stop, loop, task = asyncio.Event(), asyncio.get_running_loop(), asyncio.current_task()

        def interrupted() -> None:
            if not stop.is_set():
                stop.set()
            elif task is not None:
                task.cancel()

        loop.add_signal_handler(signal.SIGINT, interrupted)
        try:
            result = await repartition(settings, args.to, args.partitions, stop=stop,
                                       exit_when_caught_up=args.exit_when_caught_up, progress=show)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        return result, stop.is_set()

    result: RepartitionProgress | None
    try:
        result, stopped = asyncio.run(copy())
    except (KeyboardInterrupt, asyncio.CancelledError):
        stopped, result = True, (last[0] if last else None)
    finally:
        bar.close()
    if result is not None:
        print(orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2).decode())
    if not stopped:
        return 0
    print(f"om repartition: stopped; the same command resumes the copy into {args.to!r} "
          "(--exit-when-caught-up to finish at the source's end)", file=sys.stderr)
    return EXIT_INTERRUPTED


def add_commands(command: CommandMaker) -> None:
    p = command("repartition", help="copy the input log into a new namespace with another partition count",
                description="Copy this namespace's input log (and model-result cache) into namespace TO, "
                "created with PARTITIONS partitions, each record under its memory key so it lands on its "
                "memory's new partition, in order; then keep copying what is produced until Ctrl-C. "
                "Run it again to resume. Workers of TO (same OM_RESULT_KEY, OM_PARTITIONS=PARTITIONS) "
                "refold the memories without model calls; see docs/operations.md, 'Growing the partition count'.")
    p.add_argument("--to", required=True, type=_namespace, metavar="NAMESPACE",
                   help="the new namespace (empty, or this copy's)")
    p.add_argument("--partitions", required=True, type=_partitions, help="its partition count")
    p.add_argument("--exit-when-caught-up", action="store_true",
                   help="stop once the source's end is copied (default: keep following it)")
    p.set_defaults(func=cmd_repartition)
