"""End-to-end benchmark of one worker (or `--fold-workers N` fold workers and a models worker): a
real broker, `om worker` children, the producer client.

    python -m bench.e2e            # the default sizes, meant for under 10 minutes on an idle 2-core machine
    python -m bench.e2e --quick    # a smoke run of about a minute
    python -m bench.e2e --help

What runs
    A single-node Kafka broker (`omstream.infra.broker.Broker`) on free ports in a temporary
    directory, the topics of a fresh namespace (`omstream.topics.ensure_topics`, 4 partitions),
    and ONE worker child (`omstream.processes.start_child(settings, "worker", log)`), with the
    scripted observer and reflector (no network), async buffering on (the default) and
    `messageTokens` 3000 so cycles happen.  The bench process produces with `OmClient` and
    follows `<ns>.events` with a plain aiokafka consumer; every time stamp is
    `time.monotonic()` in this process (at produce, and when an event is consumed).

What is measured (each run uses its own threads, all in the one namespace)
    1. sustained messages/s without steps: T threads x N messages of ~200 tokens, each thread
       sending its messages one after another as fast as the broker acknowledges them, from the
       first produce to the consume of the last `om-message-accepted` of the run;
    2. the same with a `step-started` after each message (the agent-loop shape), until the last
       message is accepted and every step's `data-om-status` has been consumed;
    3. latency at fixed offered loads (messages/s): half the threads send messages only (their
       thresholds are checked per message) -> produce to `data-om-status` p50/p99; the other
       half send a step after each message -> step to `data-om-activation` p50/p99, for the
       steps that crossed the activation threshold.  Events are matched to their inputs in
       fold order per thread (`message_status_times`, `step_times`), not by `inputOffset`: a
       record held during a blocking cycle carries the offset of the result that released it;
    4. changelog bytes per message: key + value bytes appended to every `<app_id>-*-changelog`
       topic while run 1 ran (until the worker went quiet), divided by run 1's messages;
    5. state bytes of one memory after 100 / 1 000 / 10 000 messages on one thread (produced
       in order, at most `STATE_WINDOW` ahead of the fold, as a conversation is): the
       changelogs read back, the latest value per key (None is a tombstone), summed over the
       keys `thread:<id>` and `thread:<id>\\x00...` (the split layout);
    6. the worker's RSS (VmRSS of the python process of its process group) after each run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.e2e_env import QUICK, BenchError, Options, start_env
from bench.e2e_runs import measure

__all__ = ["format_report", "main", "options_from"]

#: messages/s the original implementation sustained end to end, with async buffering.
ORIGINAL_MPS = 62.0
COUNTERS = ("tokenx", "tiktoken")


# --- the report ----------------------------------------------------------------------------------------------
def _kb(n: float) -> str:
    return f"{n / 1024:,.1f} KiB" if n >= 1024 else f"{n:,.0f} B"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _cycles(events: Mapping[str, int]) -> str:
    """The cycles a run caused, from its event counts (buffered, activated, blocking, failed)."""
    failed = sum(n for kind, n in events.items() if kind.endswith("-failed"))
    return (f"buffered {events.get('data-om-buffering-end', 0)}, activations "
            f"{events.get('data-om-activation', 0)}, blocking "
            f"{events.get('data-om-observation-start', 0)}, failed {failed}")


def format_report(report: Mapping[str, Any]) -> str:
    """The figures as a table with units, the original's 62 messages/s as a ratio column; the
    sections a failed run did not reach are left out."""
    sustained, loads = report.get("sustained", []), report.get("loads", [])
    state = report.get("state", {})
    rows: list[tuple[str, str, str, str]] = []
    for run in sustained:
        name = ("1 sustained, no steps" if not run["steps"] else "2 sustained, step after each message")
        rows.append((f"{name} ({run['messages']:,} messages)", f"{run['messages_per_s']:,.1f}",
                     "messages/s", f"{run['messages_per_s'] / ORIGINAL_MPS:.2f}x"))
        rows.append(("    records (messages + steps) / s", f"{run['records_per_s']:,.1f}",
                     "records/s", ""))
        rows.append(("    producer: first produce -> last ack", f"{run['produce_seconds']:,.1f}",
                     "s", f"of {run['seconds']:,.1f} s"))
    for load in loads:
        head = f"3 load {load['offered_per_s']:,}/s"
        rows.append((f"{head}: produced", f"{load['achieved_per_s']:,.0f}", "messages/s",
                     f"{load['messages']:,} messages"))
        rows.append((f"{head}: message -> status p50 / p99",
                     f"{_ms(load['status']['p50_ms'])} / {_ms(load['status']['p99_ms'])}", "ms",
                     f"n={load['status']['n']}"))
        rows.append((f"{head}: step -> activation p50 / p99",
                     f"{_ms(load['activation']['p50_ms'])} / {_ms(load['activation']['p99_ms'])}",
                     "ms", f"n={load['activation']['n']}"))
        rows.append((f"{head}: drain after last produce", f"{load['drain_seconds']:,.1f}", "s", ""))
    if sustained and sustained[0].get("changelog"):
        log = sustained[0]["changelog"]
        rows.append(("4 changelog bytes per message (run 1)", _kb(log["bytes_per_message"]),
                     "per message", f"{log['records_per_message']:.2f} records/message"))
        for kind, part in log.get("kinds", {}).items():
            rows.append((f"  of which {kind}", f"{part['bytes_per_message']:,.0f}", "B/message",
                         f"{part['records_per_message']:.2f} records/message"))
    for point in state.get("points", []):
        rows.append((f"5 state of one memory after {point['messages']:,} messages",
                     _kb(point["state_bytes"]), "", f"{point['keys']} key(s); folded "
                     f"{point['messages'] / max(point['seconds'], 1e-9):,.0f} messages/s on one thread"))
    rss = [(f"run {run['run'][1:]}", run["rss"]) for run in sustained]
    rss += [(f"load {x['offered_per_s']}/s", x["rss"]) for x in loads]
    rss += [("run 5", state["rss"])] if "rss" in state else []
    for label, value in rss:
        rows.append((f"6 worker RSS after {label}", f"{value['rss_kb'] / 1024:,.0f}", "MiB",
                     f"peak {value['peak_kb'] / 1024:,.0f} MiB"))
    head = ("figure", "value", "unit", f"vs original ({ORIGINAL_MPS:.0f} msg/s) / note")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    lines = [f"$ {report['command']}", report["summary"], ""]
    for index, row in enumerate([head, *rows]):
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].ljust(widths[2]), row[3]]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    cycles = [(run["run"], run["events"]) for run in sustained]
    cycles += [(f"l{x['offered_per_s']}", x["events"]) for x in loads]
    cycles += [("s", state["events"])] if state.get("events") else []
    lines += [f"cycles {label}: {_cycles(counts)}" for label, counts in cycles]
    lines.append(f"dead letters: {report.get('dead_letters', '-')}"
                 + "".join(f"\n  {example}" for example in report.get("dead_letter_examples", [])))
    lines.append(f"changelogs: {', '.join(report.get('changelogs', [])) or '-'}")
    if report.get("error"):
        lines.append(f"FAILED (the figures above are those measured before): {report['error']}")
    lines.append(f"wall time {report['wall_seconds']:,.0f} s; JSON: {report['out']}")
    return "\n".join(lines)


# --- command line --------------------------------------------------------------------------------------------
def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(dict.fromkeys(int(v) for v in text.split(",") if v.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def _at_least(low: float, kind: type = int) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {text}")
        return value
    return parse


def _parser() -> argparse.ArgumentParser:
    d = Options()
    parser = argparse.ArgumentParser(
        prog="python -m bench.e2e",
        description="End-to-end benchmark of one worker on a local broker it starts itself: "
                    "sustained messages/s (without and with steps), latency at fixed loads, "
                    "changelog bytes per message, state bytes of a growing memory, worker RSS.")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, about a minute (a smoke run, not a measurement)")
    parser.add_argument("--threads", type=_at_least(1), help=f"runs 1-2: threads (default {d.threads})")
    parser.add_argument("--messages", type=_at_least(1),
                        help=f"runs 1-2: messages per thread (default {d.messages})")
    parser.add_argument("--tokens", type=_at_least(20), help=f"tokens per message (default {d.tokens})")
    parser.add_argument("--message-tokens", type=_at_least(100),
                        help=f"observation.messageTokens (default {d.message_tokens})")
    parser.add_argument("--loads", type=_ints, help="run 3: offered loads in messages/s, "
                        f"comma-separated (default {','.join(map(str, d.loads))})")
    parser.add_argument("--load-seconds", type=_at_least(0.5, float),
                        help=f"run 3: seconds each load is offered (default {d.load_seconds})")
    parser.add_argument("--load-threads", type=_at_least(2),
                        help=f"run 3: threads, half of them with steps (default {d.load_threads})")
    parser.add_argument("--checkpoints", type=_ints, help="run 5: message counts at which the "
                        f"memory's state is measured (default {','.join(map(str, d.checkpoints))})")
    parser.add_argument("--fold-workers", type=_at_least(0), help="0 (default): one `om worker` "
                        "(role all); N: N `om worker --role fold` and one `om worker --role models`")
    parser.add_argument("--model-latency", type=_at_least(0), dest="model_latency_ms",
                        help="milliseconds each scripted model call takes (default 0)")
    parser.add_argument("--model-concurrency", type=_at_least(1),
                        help="[omstream] model_concurrency (default: omstream's)")
    parser.add_argument("--encrypt", action="store_const", const=True,
                        help="configure a namespace key: every memory's content sealed (README 'Forgetting')")
    parser.add_argument("--no-state", dest="state", action="store_const", const=False,
                        help="skip run 5 (a growing memory's state bytes)")
    parser.add_argument("--counter", choices=COUNTERS, help="tokenCounter (default tokenx)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--stall", type=_at_least(1, float), help="fail when no awaited event arrives for this "
                        f"many seconds (default {d.stall:.0f})")
    parser.add_argument("--out", type=Path, help="where to write the JSON report (default: a "
                        "file in the system temp dir, printed at the end)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (broker data, worker log)")
    return parser


def options_from(args: argparse.Namespace) -> Options:
    """The defaults, then --quick's sizes, then every option given explicitly."""
    options = replace(Options(), **QUICK) if args.quick else Options()
    given = {name: value for name, value in vars(args).items()
             if name != "quick" and value is not None and not (name == "keep" and value is False)}
    return replace(options, **given)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    options = options_from(args)
    began = time.monotonic()
    command = shlex.join(["python", "-m", "bench.e2e", *(sys.argv[1:] if argv is None else argv)])
    # The bench's om.toml is the whole configuration: no OM_* variable of this shell may change
    # the worker's namespace, broker or thresholds.
    for name in [n for n in os.environ if n.startswith("OM_")]:
        del os.environ[name]
    root = Path(tempfile.mkdtemp(prefix="omstream-e2e-"))
    out = options.out or Path(tempfile.gettempdir()) / f"omstream-e2e-{time.strftime('%Y%m%d-%H%M%S')}.json"
    # SIGTERM unwinds like Ctrl-C, so the worker and the broker are always stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    report: dict[str, Any] = {}
    status = 0
    with contextlib.ExitStack() as stack:
        if not options.keep:
            stack.callback(shutil.rmtree, root, ignore_errors=True)
        try:
            asyncio.run(_bench(root, options, stack, report))
        except BenchError as exc:
            report["error"] = str(exc)
            status = 1
        except KeyboardInterrupt:
            report["error"] = "interrupted"
            status = 130
    report.update(command=command, out=str(out), wall_seconds=time.monotonic() - began,
                  summary=_summary(options), options={**asdict(options), "out": str(out)},
                  machine={"python": platform.python_version(), "cpus": os.cpu_count(),
                           "platform": platform.platform()})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(format_report(report))
    if status:
        print(f"\ne2e benchmark stopped: {report['error']}", file=sys.stderr)
    return status


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


async def _bench(root: Path, options: Options, stack: contextlib.ExitStack,
                 report: dict[str, Any]) -> None:
    env = await start_env(root, options, stack)
    report["worker_log"] = str(env.worker_log) if options.keep else None
    await measure(env, options, report)


def _summary(o: Options) -> str:
    workers = ("one worker" if o.fold_workers == 0 else
               f"{o.fold_workers} fold worker(s) and one models worker")
    model = (f"scripted models of {o.model_latency_ms} ms" if o.model_latency_ms else "scripted models")
    if o.model_concurrency is not None:
        model += f", model_concurrency {o.model_concurrency}"
    if o.encrypt:
        model += ", content sealed (namespace key)"
    return (f"{workers}, 4 partitions, {o.counter}, ~{o.tokens}-token messages, messageTokens "
            f"{o.message_tokens}, async buffering on, {model}; runs 1-2: {o.threads} "
            f"threads x {o.messages} messages; run 3: {o.load_seconds:g} s per load over "
            f"{o.load_threads} threads; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    sys.exit(main())
