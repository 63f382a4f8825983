"""Replay throughput: `om replay` of a retained log, with a cold and with a warm model cache.

    python -m bench.replay                       # 100,000 messages across 1,000 threads
    python -m bench.replay --messages 10000 --threads 100
    python -m bench.replay --paths bulk        # the bulk path alone (or: worker)
    python -m bench.replay --help

What runs
    A single-node Kafka broker on free ports in a temporary directory and a fresh namespace (4
    partitions).  The bench produces the history straight to `<ns>.log` (messages of ~200
    tokens, user and assistant in turn, with the scripted observer and reflector and
    `messageTokens` 3000, so observation, buffering and reflection happen), then replays it
    with `omstream.replay.replay.replay` (the code of `om replay`), for each path:

    - `worker`: the version's worker folds the whole log (`om replay --no-bulk`): a job goes
      through `<ns>.jobs` and its answer comes back at the log's end;
    - `bulk`: the log is folded in the replaying process, jobs answered in-process, outputs
      and states written in batches, then the worker takes over at the log's end
      (`omstream.replay.bulk`);

    each path twice:

    1. `cold`: every request is new, so each is a (scripted) model call that fills the cache
       (each path's cold pass asks with its own `modelSettings`, which the scripted models
       ignore: the same decisions, other request hashes);
    2. `warm`: the same configuration again under another name: every request is a cache hit.

    Every replay is settled (no live version is registered, so there are no recorded results
    to follow).

What is printed
    Per pass: input-log records folded, memories, model calls, cache hits, seconds and
    records/s.  The worker's seconds run from its first committed progress to caught up; the
    bulk path's from the start of the bulk fold (the result cache loaded, the log read, states
    and positions written) to its end, and `handover` from there until the version's worker
    has started and caught up with the log.  Measured in one run (these machines are noisy;
    compare within a run, not across runs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from omstream.client import OmClient
from omstream.engine.rules.tokens import get_counter
from omstream.replay.replay import ReplayProgress, replay
from omstream.schemas.messages import Message

from .e2e_env import Options, start_namespace
from .fold_bench import make_bodies


def progress(text: str) -> None:
    print(f"[replay {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


async def produce(settings, messages: int, threads: int, tokens: int) -> int:
    """The history, straight to the input log, a batch of threads at a time."""
    bodies = make_bodies(200, 7, tokens - 4, get_counter("tokenx"))
    now = datetime.now(UTC)
    per_thread = messages // threads
    async with OmClient(settings) as client:
        for first in range(0, threads, 50):
            # The thread's name in each message: no two threads make the same request, so the
            # cold pass is cold (the cache would answer a request another thread made).
            batch = [Message(id=f"r{t}-m{i}", thread_id=f"r{t}", role="assistant" if i % 2 else "user",
                             content=f"[r{t}] {bodies[(t * 31 + i) % len(bodies)]}", created_at=now)
                     for t in range(first, min(first + 50, threads)) for i in range(per_thread)]
            await client.send_messages(batch)
            progress(f"produced {min(first + 50, threads) * per_thread} of {per_thread * threads} messages")
    return per_thread * threads


async def one_pass(settings, name: str, bulk: bool) -> dict[str, Any]:
    progress(f"replay {name!r} ({'bulk' if bulk else 'worker'}) ...")
    last = {"at": 0.0}

    def show(f: ReplayProgress) -> None:
        if time.monotonic() - last["at"] > 5:
            last["at"] = time.monotonic()
            progress(f"  {name}: {f.folded}/{f.total} records, calls {f.model_calls}, "
                     f"hits {f.cache_hits}, {f.records_per_s} rec/s")

    started = time.monotonic()
    result = await replay(replace(settings, version=name), mode="settled", exit_when_caught_up=True,
                          bulk=bulk, progress=show)
    figures = result.to_json()
    if result.bulk is not None:
        b = result.bulk
        figures.update(folded=b.records, foldS=b.seconds, foldRecordsPerS=b.records_per_s,
                       handoverS=round(time.monotonic() - started - b.seconds, 1))
    progress(f"  {name}: {figures}")
    return figures


def with_settings(settings, temperature: float):
    """The options with model settings the scripted models ignore: other request hashes."""
    om = settings.om
    observation = om.observation.model_copy(update={"model_settings": {"temperature": temperature}})
    reflection = om.reflection.model_copy(update={"model_settings": {"temperature": temperature}})
    return replace(settings, om=om.model_copy(update={"observation": observation, "reflection": reflection}))


async def bench(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        settings = await start_namespace(root, stack, Options(counter="tokenx", message_tokens=3000), "rp")
        sent = await produce(settings, args.messages, args.threads, args.tokens)
        passes: dict[str, Any] = {}
        for i, path in enumerate(args.paths.split(",")):
            bulk = path == "bulk"
            tuned = with_settings(settings, 0.1 * (i + 1))
            passes[f"{path} cold"] = await one_pass(tuned, f"{path}-cold", bulk)
            passes[f"{path} warm"] = await one_pass(tuned, f"{path}-warm", bulk)
    return {"messages": sent, "threads": args.threads, "passes": passes}


def format_report(r: dict[str, Any]) -> str:
    rows = [("pass", "records", "memories", "model calls", "cache hits", "seconds", "records/s", "handover s")]
    for name, f in r["passes"].items():
        rows.append((name, str(f["folded"]), str(f["memories"]), str(f["modelCalls"]), str(f["cacheHits"]),
                     f"{f['foldS']:.1f}", f"{f['foldRecordsPerS']:.0f}",
                     f"{f['handoverS']:.1f}" if "handoverS" in f else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [f"settled replay of {r['messages']} messages across {r['threads']} threads (one process)"]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows]
    passes = r["passes"]
    if "bulk warm" in passes and "worker warm" in passes and passes["worker warm"]["foldRecordsPerS"]:
        ratio = passes["bulk warm"]["foldRecordsPerS"] / passes["worker warm"]["foldRecordsPerS"]
        lines.append(f"warm records/s, bulk / worker: {ratio:.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages in the history")
    parser.add_argument("--threads", type=int, default=1_000, help="threads they are spread over")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per message (about)")
    parser.add_argument("--paths", default="worker,bulk", help="the paths to measure, in order: worker, bulk")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="om-replay-bench-") as tmp:
        report = asyncio.run(bench(Path(tmp), args))
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
