"""Copy throughput of `om repartition`: a retained input log copied from 4 to 8 partitions.

    python -m bench.repartition                  # 100,000 messages across 1,000 threads
    python -m bench.repartition --messages 20000 --threads 200

What runs
    A single-node Kafka broker on free ports in a temporary directory and a namespace of 4
    partitions; the history (messages of ~200 tokens, as `bench.replay` makes it) is produced
    straight to `<ns>.log`; then `omstream.repartition.repartition` (the code of `om
    repartition --exit-when-caught-up`, one process) copies it into a new namespace of 8.

What is printed
    Records copied, the seconds until the copy reached the source's end (topics created and
    the clients started included) and records/s over them.  Folding the copy is the new
    namespace's workers' work, measured by `bench.replay` and `bench.e2e`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from omstream.repartition import repartition

from .e2e_env import Options, start_namespace
from .replay import produce


async def bench(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        settings = await start_namespace(root, stack, Options(counter="tokenx", message_tokens=3000), "rp")
        sent = await produce(settings, args.messages, args.threads, args.tokens)
        started = time.monotonic()
        result = await repartition(settings, settings.namespace + "-8", 8, exit_when_caught_up=True)
        seconds = time.monotonic() - started
    return {"messages": sent, "copied": result.copied, "seconds": round(seconds, 2),
            "recordsPerS": round(result.copied / seconds, 1), "copy": result.to_json()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.repartition", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages in the history")
    parser.add_argument("--threads", type=int, default=1_000, help="threads they are spread over")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per message (about)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="om-repartition-bench-") as tmp:
        report = asyncio.run(bench(Path(tmp), args))
    print(f"om repartition 4 -> 8 partitions: {report['copied']} records copied in {report['seconds']} s, "
          f"{report['recordsPerS']:.0f} records/s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
