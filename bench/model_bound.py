"""Model-bound throughput: how many active threads one model-agent process sustains when every
model call takes as long as a hosted model's does.

    python -m bench.model_bound                          # 2 s calls, concurrency 4 and 32 (default)
    python -m bench.model_bound --latency 2000 --concurrency 4,32 --pace 10

What runs
    `bench.e2e`'s environment: its own broker, one `om worker --role fold` and one
    `om worker --role models` whose scripted Observer and Reflector take `--latency` ms per call
    (`modelSettings.latencyMs`: an `asyncio.sleep` in the call, as a network wait is), async
    buffering at its default (a `buffer` job every 600 tokens at messageTokens 3000).  For each
    `--concurrency` the models worker is (re)started with `OM_MODEL_CONCURRENCY` set to it, then
    max(16, 4 x concurrency) threads each produce `--messages` ~200-token messages at once, so
    more jobs wait than calls may run.

What is measured, per concurrency
    cycles/s: the run's cycles (buffering, blocking observation and reflection cycles that
    ended) divided by the seconds from the first produce to the consume of the last cycle's end
    event.  At most concurrency / latency (e.g. 4 / 2 s = 2 cycles/s).
    messages/s bound: cycles/s x the messages of one buffering interval (bufferTokens, by default
    0.2 x messageTokens = 600 tokens: 3 messages): the rate of new messages one model-agent
    process keeps observed a chunk at a time.  A model that falls behind observes larger chunks
    per cycle (the run's own messages per cycle shows it: each thread's messages arrived during
    its first call), until memories reach `blockAfter` and block; so the bound is a floor.
    threads sustained: that bound x `--pace` (a thread adds a message every `--pace` seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.e2e import _ints
from bench.e2e_env import RESULT_KEY, BenchError, Env, Options, progress, start_env
from bench.e2e_runs import Conversation, throughput_run
from bench.e2e_timing import EventTimes, wait_for
from omstream.client import OmClient
from omstream.processes import start_child, stop_child
from omstream.schemas.config.agents import ObservationConfig
from omstream.settings import Settings

CYCLE_ENDS = ("data-om-buffering-end", "data-om-observation-end", "data-om-reflection-end")
CYCLE_STARTS = ("data-om-buffering-start", "data-om-observation-start", "data-om-reflection-start")
#: omstream's default observation.bufferTokens, a fraction of messageTokens.
BUFFER_RATIO = ObservationConfig().buffer_tokens
FAILED = ("data-om-buffering-failed", "data-om-observation-failed", "data-om-reflection-failed")


class CycleTimes(EventTimes):
    """EventTimes that also keeps, per run, when the last cycle ended."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.last_end: dict[str, float] = {}

    def _note(self, event: dict, now: float) -> None:
        super()._note(event, now)
        if event.get("type") in CYCLE_ENDS:
            self.last_end[(event.get("threadId") or "").split("-", 1)[0]] = now

    def open_cycles(self, run: str) -> int:
        counts = self.counts(run)
        return sum(counts.get(k, 0) for k in CYCLE_STARTS) - sum(counts.get(k, 0) for k in CYCLE_ENDS + FAILED)


@dataclass
class Point:
    concurrency: int
    threads: int
    messages: int
    cycles: int
    failed: int
    seconds: float
    cycles_per_s: float
    ceiling_per_s: float        # concurrency / latency
    messages_per_cycle: float
    messages_per_s_bound: float
    threads_sustained: float


def interval_messages(options: Options) -> float:
    """Messages in one buffering interval at omstream's default bufferTokens (0.2)."""
    return BUFFER_RATIO * options.message_tokens / options.tokens


def restart_models(env: Env, concurrency: int, stack: contextlib.ExitStack) -> None:
    """Stop the models worker and start one with OM_MODEL_CONCURRENCY = concurrency; it takes
    over the jobs group's committed offsets."""
    index = next(i for i, (name, _, _) in enumerate(env.workers) if name == "models")
    name, old, _ = env.workers[index]
    stop_child(old)
    log = env.root / f"worker-models-{concurrency}.log"
    worker = start_child(env.settings, "worker", log, env={
        "OM_ROLE": "models", "OM_RESULT_KEY": RESULT_KEY, "OM_MODEL_CONCURRENCY": str(concurrency),
        "OM_DATA_DIR": str(env.root / "data" / f"models-{concurrency}")})
    stack.callback(stop_child, worker)
    env.workers[index] = (name, worker, log)
    progress(f"models worker with model_concurrency {concurrency}: pid {worker.pid}")


async def measure_point(env: Env, om: OmClient, events: CycleTimes, conv: Conversation,
                        options: Options, concurrency: int, pace: float) -> Point:
    run = f"c{concurrency}"
    threads = max(16, 4 * concurrency)  # four waves of calls at least: the ramp counts little
    run_options = replace(options, threads=threads)
    first = time.monotonic()
    await throughput_run(env, om, events, conv, run_options, run, steps=False)
    latency = options.model_latency_ms / 1000

    def settled() -> bool:
        return (events.open_cycles(run) == 0 and run in events.last_end
                and time.monotonic() - events.last_end[run] > latency + 1.0)

    await wait_for(env, events, settled, f"run {run}'s cycles", max(options.stall, 4 * latency))
    counts = events.counts(run)
    cycles = sum(counts.get(k, 0) for k in CYCLE_ENDS)
    seconds = events.last_end[run] - first
    messages = threads * options.messages
    per_s = cycles / seconds
    bound = per_s * interval_messages(options)
    progress(f"  concurrency {concurrency}: {cycles} cycles in {seconds:.1f} s = {per_s:.2f}/s")
    return Point(concurrency=concurrency, threads=threads, messages=messages, cycles=cycles,
                 failed=sum(counts.get(k, 0) for k in FAILED), seconds=seconds, cycles_per_s=per_s,
                 ceiling_per_s=concurrency / latency, messages_per_cycle=messages / cycles,
                 messages_per_s_bound=bound, threads_sustained=bound * pace)


async def warm_up(env: Env, om: OmClient, events: CycleTimes, conv: Conversation, options: Options,
                  concurrency: int) -> None:
    """One thread past one buffering cycle, so that the (re)started models worker has joined its
    group and answered a call before the timed run."""
    run = f"w{concurrency}"
    await throughput_run(env, om, events, conv, replace(options, threads=1, messages=4), run, steps=False)
    await wait_for(env, events, lambda: run in events.last_end and events.open_cycles(run) == 0,
                   "the warm-up's cycle (models worker start)", max(options.stall, 180.0))


async def bench(root: Path, options: Options, concurrencies: Sequence[int], pace: float,
                stack: contextlib.ExitStack, points: list[Point]) -> None:
    env = await start_env(root, options, stack)
    conv = Conversation(options)
    events = CycleTimes(env.settings)
    await events.start()
    try:
        async with OmClient(env.settings) as om:
            for concurrency in concurrencies:
                restart_models(env, concurrency, stack)
                await warm_up(env, om, events, conv, options, concurrency)
                points.append(await measure_point(env, om, events, conv, options, concurrency, pace))
    finally:
        await events.stop()


def format_report(report: dict[str, Any]) -> str:
    head = ("model_concurrency", "threads x msgs", "cycles", "cycles/s", "ceiling/s",
            "msgs/cycle (run)", "messages/s bound", f"threads at 1 msg/{report['pace']:g} s")
    rows = [(str(p["concurrency"]), f"{p['threads']} x {p['messages'] // p['threads']}",
             f"{p['cycles']}" + (f" ({p['failed']} failed)" if p["failed"] else ""),
             f"{p['cycles_per_s']:.2f}", f"{p['ceiling_per_s']:.1f}", f"{p['messages_per_cycle']:.1f}",
             f"{p['messages_per_s_bound']:.1f}", f"{p['threads_sustained']:,.0f}")
            for p in report["points"]]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [f"$ {report['command']}", report["summary"], ""]
    for index, row in enumerate([head, *rows]):
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    if report.get("error"):
        lines.append(f"FAILED: {report['error']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_bound", description=__doc__.split("\n")[0])
    parser.add_argument("--latency", type=int, default=2000, help="ms per model call (default 2000)")
    parser.add_argument("--concurrency", type=_ints, help="model_concurrency values, comma-separated "
                        "(default: omstream's default and 32)")
    parser.add_argument("--messages", type=int, default=6, help="messages per thread (default 6)")
    parser.add_argument("--pace", type=float, default=10.0,
                        help="seconds between two messages of an active thread (default 10)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    concurrencies = args.concurrency or tuple(dict.fromkeys((Settings().model_concurrency, 32)))
    options = Options(messages=args.messages, fold_workers=1, model_latency_ms=args.latency,
                      state=False, stall=max(120.0, 6 * args.latency / 1000))
    for name in [n for n in os.environ if n.startswith("OM_")]:
        del os.environ[name]
    command = shlex.join(["python", "-m", "bench.model_bound", *(sys.argv[1:] if argv is None else argv)])
    report: dict[str, Any] = {
        "command": command, "pace": args.pace, "latency_ms": args.latency, "points": [],
        "summary": f"one fold worker and one models worker, scripted models of {args.latency} ms per call, "
                   f"~200-token messages, messageTokens 3000, async buffering; {os.cpu_count()} CPUs"}
    root = Path(tempfile.mkdtemp(prefix="omstream-model-bound-"))
    status = 0
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        points: list[Point] = []
        try:
            asyncio.run(bench(root, options, concurrencies, args.pace, stack, points))
        except BenchError as exc:
            report["error"], status = str(exc), 1
        report["points"] = [p.__dict__ for p in points]
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main())
