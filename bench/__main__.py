"""Every benchmark of bench/ in one run, and one table: `python -m bench`.

    python -m bench                     # about 13 minutes on a busy 2-core machine
    python -m bench --only fold,original
    python -m bench --out DIR           # keep each benchmark's JSON and log in DIR
    python -m bench --against HEAD~1 --only e2e-1,replay   # both commits in one run, with ratios

Each benchmark runs alone, one after the other, as its own `python -m bench.<name>` child with
the sizes below (each figure of the table is printed with that command, which reproduces it
alone), so no two of them share the machine.  The original (`bench.original`, Node.js) runs in the
same session, and omstream's fold and end-to-end figures are printed as ratios to it: the fold
(synchronous observation) to the original with buffering off, end to end (async buffering) to the
original with buffering on.  Not run here, because they need a local language model and about an
hour: `python -m bench.quality` (memory quality on LoCoMo, see bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench import against

ROOT = Path(__file__).resolve().parents[1]
E2E = ["--threads", "100", "--messages", "40", "--load-seconds", "3", "--no-state"]

#: (figure, value, unit, ratio to the original or note); the command is the step's.
Row = tuple[str, str, str, str]


@dataclass
class Step:
    """One benchmark: its module and arguments, how its figures reach us (`json_flag` names the
    option that writes its JSON file; None: parsed from its stdout), and its rows."""

    name: str
    module: str
    args: list[str]
    json_flag: str | None
    rows: Callable[[Any, dict[str, Any]], list[Row]]
    result: Any = None
    error: str | None = None
    seconds: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)   # 1-minute load average before and after
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def command(self) -> str:
        return shlex.join(["python", "-m", f"bench.{self.module}", *self.args])


# --- rows of each benchmark, from its JSON (the original's figures in `ref`) --------------------------
def ratio(value: float, of: float | None) -> str:
    return f"{value / of:.1f}x" if of else "-"


def cpu_rate(run: dict[str, Any]) -> float:
    """The original's messages per CPU-second of its (single-threaded) process: its wall rate on
    an idle core, which other work on the machine does not lower."""
    return float(run["messages"] / run["cpu_seconds"])


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def fold_rows(result: dict[str, Any], ref: dict[str, Any]) -> list[Row]:
    rows = []
    for row in result["rows"]:
        if row["scenario"].startswith("fold ingest"):
            layout = "one thread" if row["threads"] == 1 else f"{row['threads']:,} threads"
            rows.append((f"fold alone, one core, {layout}, {row['messages']:,} messages "
                         f"({row['observe_cycles']} observations)", f"{row['messages_per_s']:,.0f}",
                         "messages/CPU-s", ratio(row["messages_per_s"], ref.get("buffering off cpu"))))
    return rows


def e2e_rows(result: dict[str, Any], ref: dict[str, Any]) -> list[Row]:
    rows = []
    for run in result.get("sustained", []):
        what = "a step after each message" if run["steps"] else "no steps"
        rows.append((f"end to end, {run['messages']:,} messages on 100 threads, {what}",
                     f"{run['messages_per_s']:,.0f}", "messages/s",
                     f"{ratio(run['messages_per_s'], ref.get('buffering on'))} (wall; "
                     f"{ratio(run['messages_per_s'], ref.get('buffering on cpu'))} its per-CPU-second rate)"))
    for load in result.get("loads", []):
        status, act = load["status"], load["activation"]
        rows.append((f"  at {load['offered_per_s']} messages/s: message -> status p50 / p99",
                     f"{ms(status['p50_ms'])} / {ms(status['p99_ms'])}", "ms",
                     f"drained {load['drain_seconds']:.1f} s after the last produce"))
        if act["n"]:
            rows.append((f"  at {load['offered_per_s']} messages/s: step -> activation p50 / p99",
                         f"{ms(act['p50_ms'])} / {ms(act['p99_ms'])}", "ms", f"n={act['n']}"))
    log = (result.get("sustained") or [{}])[0].get("changelog")
    if log:
        rows.append(("  changelog per message", f"{log['bytes_per_message'] / 1024:,.1f}", "KiB",
                     f"{log['records_per_message']:.1f} records"))
    if result.get("error"):
        rows.append(("  stopped", "-", "", result["error"].splitlines()[0][:100]))
    return rows


def plain_reference(step: Step | None) -> dict[str, float]:
    """messages/s of the plain one-fold-worker e2e runs ("e2e steps" / "e2e no steps"), which the
    sealed run is compared with ({} when it did not run)."""
    if step is None or not isinstance(step.result, dict):
        return {}
    return {f"e2e {'steps' if r['steps'] else 'no steps'}": r["messages_per_s"]
            for r in step.result.get("sustained", [])}


def sealed_rows(result: dict[str, Any], ref: dict[str, Any]) -> list[Row]:
    """The e2e runs with a namespace key, as a share of the same runs without one (e2e-1)."""
    rows = []
    for run in result.get("sustained", []):
        what = "a step after each message" if run["steps"] else "no steps"
        plain = ref.get(f"e2e {'steps' if run['steps'] else 'no steps'}")
        share = f"{run['messages_per_s'] / plain:.2f} of the same run without encryption" if plain else "-"
        rows.append((f"end to end, content sealed, {run['messages']:,} messages, {what}",
                     f"{run['messages_per_s']:,.0f}", "messages/s", share))
    if result.get("error"):
        rows.append(("  stopped", "-", "", result["error"].splitlines()[0][:100]))
    return rows


def model_bound_rows(result: dict[str, Any], ref: dict[str, Any]) -> list[Row]:
    latency = result["latency_ms"] / 1000
    return [(f"{latency:g} s model calls, model_concurrency {p['concurrency']}: cycles/s "
             f"(ceiling {p['ceiling_per_s']:g})", f"{p['cycles_per_s']:.2f}", "cycles/s",
             f"bound {p['messages_per_s_bound']:,.0f} messages/s = {p['threads_sustained']:,.0f} threads "
             f"at 1 message / {result['pace']:g} s") for p in result["points"]]


def replay_rows(result: dict[str, Any], ref: dict[str, Any]) -> list[Row]:
    """One row per pass of `bench.replay` (`worker cold`, ..., `bulk warm`)."""
    return [(f"replay {name}, {result['messages']:,} messages on {result['threads']} threads",
             f"{p['foldRecordsPerS']:,.0f}", "records/s",
             f"{p['modelCalls']} calls, {p['cacheHits']} cache hits"
             + (f"; hand-over {p['handoverS']} s" if "handoverS" in p else ""))
            for name, p in result["passes"].items()]


def serve_rows(result: dict[str, Any], ref: dict[str, Any]) -> list[Row]:
    return [(f"om serve start, {r['messages']:,} messages ({r['events']:,} events): cold / warm",
             f"{r['coldS']} / {r['warmS']}", "s", f"warm store load {r['warmLoadS']} s; RSS {r['coldRssMb']} / "
             f"{r['warmRssMb']} MB; store {r['storeMb']} MB") for r in result["rows"]]


def repartition_rows(result: dict[str, Any], ref: dict[str, Any]) -> list[Row]:
    return [(f"om repartition 4 -> 8 partitions, {result['copied']:,} records copied",
             f"{result['recordsPerS']:,.0f}", "records/s", f"{result['seconds']} s")]


DELIVERY = re.compile(r"^(aiokafka getmany|faust \(the worker's path\)): ([\d,]+) records in [\d.]+ s = "
                      r"([\d,]+)/s.* (\d+) us CPU per record", re.M)


def delivery_rows(result: str, ref: dict[str, Any]) -> list[Row]:
    names = {"aiokafka getmany": "intake ceiling: aiokafka alone",
             "faust (the worker's path)": "intake: the worker's consumer path"}
    return [(f"{names[m[1]]}, {m[2]} records", m[3], "records/s", f"{m[4]} us CPU per record")
            for m in DELIVERY.finditer(result)]


def original_rows(result: dict[str, Any], ref: dict[str, Any]) -> list[Row]:
    if "error" in result:
        return [("the original", "-", "", f"could not run: {result['error'][:200]}")]
    return [(f"the original, {r['messages']:,} messages on one thread, {r['run']}", f"{r['messages_per_s']:,.1f}",
             "messages/s", f"{cpu_rate(r):,.0f} messages/CPU-s; {r['observer_calls']} observer calls; "
             f"event loop idle {r.get('loop_idle_share', 0):.0%}") for r in result["runs"]]


def original_reference(step: Step | None) -> dict[str, float]:
    """messages/s of the original's runs by run name, and messages/CPU-s by "<name> cpu" ({}
    when it did not run)."""
    if step is None or not isinstance(step.result, dict) or "runs" not in step.result:
        return {}
    runs = step.result["runs"]
    return {**{r["run"]: r["messages_per_s"] for r in runs}, **{f"{r['run']} cpu": cpu_rate(r) for r in runs}}


def steps() -> list[Step]:
    """The benchmarks in the order they run, with the sizes of this run."""
    return [
        Step("original", "original", ["--messages", "2000"], "--json", original_rows),
        Step("fold", "fold_bench", ["--counter", "tokenx", "--target-tokens", "200", "--message-tokens", "3000"],
             None, fold_rows),
        Step("e2e-1", "e2e", ["--fold-workers", "1", *E2E, "--loads", "200,500"], "--out", e2e_rows),
        Step("e2e-sealed", "e2e", ["--fold-workers", "1", *E2E, "--loads", "200", "--encrypt"], "--out",
             sealed_rows),
        Step("e2e-2", "e2e", ["--fold-workers", "2", *E2E, "--loads", "500"], "--out", e2e_rows),
        Step("model-bound", "model_bound", ["--latency", "2000"], "--json", model_bound_rows),
        Step("replay", "replay", ["--messages", "4000", "--threads", "40"], "--json", replay_rows),
        Step("delivery", "delivery", ["--records", "20000"], None, delivery_rows),
        Step("serve-restart", "serve_restart", ["--sizes", "2000,5000", "--threads", "100"], "--json", serve_rows),
        Step("repartition", "repartition", ["--messages", "10000", "--threads", "100"], "--json",
             repartition_rows),
    ]


# --- running -------------------------------------------------------------------------------------------
def progress(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def run_step(step: Step, out: Path, side: against.Side | None = None) -> None:
    """Run one benchmark as a child (with `side`'s interpreter and files: this checkout by default);
    its result (parsed JSON, or its stdout) or its error on `step`."""
    python, cwd = (side.python, side.root) if side else (sys.executable, ROOT)
    json_path = out / f"{step.name}.json"
    argv = [*step.args, *([step.json_flag, str(json_path)] if step.json_flag else [])]
    if step.module == "fold_bench":
        argv.append("--json")
    log = out / f"{step.name}.log"
    progress(f"{step.name}{f' ({side.name})' if side else ''}: {step.command} (log {log})")
    step.load = (os.getloadavg()[0], 0.0)
    began = time.monotonic()
    with open(log, "w") as err:
        done = subprocess.run([python, "-m", f"bench.{step.module}", *argv], cwd=cwd,
                              stdout=subprocess.PIPE, stderr=err, text=True)
    step.seconds = time.monotonic() - began
    step.load = (step.load[0], os.getloadavg()[0])
    (out / f"{step.name}.out").write_text(done.stdout)
    try:
        if step.json_flag:
            step.result = json.loads(json_path.read_text()) if json_path.exists() else None
        elif step.module == "fold_bench":
            step.result = json.loads(done.stdout)
        else:
            step.result = done.stdout
    except ValueError as exc:
        step.error = f"unreadable output: {exc}"
    if done.returncode and step.error is None:
        step.error = f"exit {done.returncode}; " + log.read_text(errors="replace")[-300:].strip().replace("\n", " | ")
    progress(f"{step.name}: {'done' if not step.error else 'FAILED'} in {step.seconds:.0f} s")


def reference(done: Sequence[Step]) -> dict[str, float]:
    """What the row functions compare with: the original's figures and the plain e2e-1 runs."""
    return {**original_reference(next((s for s in done if s.name == "original"), None)),
            **plain_reference(next((s for s in done if s.name == "e2e-1"), None))}


def step_rows(step: Step, ref: dict[str, float]) -> list[Row]:
    rows: list[Row] = []
    if step.result is not None:
        try:
            rows = step.rows(step.result, ref)
        except (KeyError, TypeError, ValueError) as exc:
            rows = [(step.name, "-", "", f"unreadable result: {exc!r}")]
    return rows


def machine(began: str, wall: float) -> str:
    return (f"({began}, {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}; "
            f"wall time {wall / 60:.1f} min)")


def table(done: Sequence[Step], began: str, wall: float) -> str:
    ref = reference(done)
    lines = [f"$ python -m bench   {machine(began, wall)}",
             "ratios: omstream / the original measured in this run. The fold (CPU time of one process) to "
             "the original's messages per CPU-second with buffering off; end to end (wall time) to the "
             "original's wall rate with buffering on, and to its per-CPU-second rate (its speed on an "
             "idle core: the conservative ratio)", ""]
    head = ("figure", "value", "unit", "vs original / note")
    for step in done:
        rows = step_rows(step, ref)
        if step.error:
            rows.append((step.name, "-", "", f"FAILED: {step.error[:200]}"))
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
        lines.append(f"$ {step.command}   ({step.seconds:.0f} s; load average {step.load[0]:.1f} -> "
                     f"{step.load[1]:.1f})")
        for row in rows:
            lines.append("  " + "  ".join([row[0].ljust(widths[0]), row[1].rjust(widths[1]),
                                           row[2].ljust(widths[2]), row[3]]).rstrip())
        lines.append("")
    lines.append("not run here (a local LLM, about an hour): python -m bench.quality --conversation 0")
    return "\n".join(lines)


def run_against(chosen: Sequence[Step], theirs: against.Side, out: Path) -> list[Step]:
    """Each chosen benchmark for this checkout and for `theirs`, one right after the other, the side
    going first alternating; returns their steps (ours are `chosen`)."""
    (out / "ours").mkdir(parents=True, exist_ok=True)
    (out / theirs.name).mkdir(parents=True, exist_ok=True)
    their_steps = [replace(step, result=None, error=None) for step in chosen]
    for i, (ours, other) in enumerate(zip(chosen, their_steps)):
        runs = [(ours, out / "ours", None), (other, out / theirs.name, theirs)]
        for step, where, side in runs[::-1] if i % 2 else runs:
            run_step(step, where, side)
    return their_steps


def comparison(ours: Sequence[Step], theirs: Sequence[Step], names: tuple[str, str], began: str,
               wall: float) -> str:
    """The table of `--against`: each figure for both sides and their ratio (ours / theirs)."""
    refs = reference(ours), reference(theirs)
    lines = [f"$ python -m bench --against {names[1]}   {machine(began, wall)}",
             f"{names[0]} and {names[1]} measured in this run, each benchmark one right after the other; "
             f"ratio: {names[0]} / {names[1]} (above 1 is faster for rates, slower for latencies and sizes)", ""]
    for a, b in zip(ours, theirs):
        rows = against.paired(step_rows(a, refs[0]), step_rows(b, refs[1]))
        lines += [*against.block(a.command, (a.seconds, b.seconds), rows, names, [a.error or "", b.error or ""]), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    names = [s.name for s in steps()]
    parser.add_argument("--only", type=lambda t: [n.strip() for n in t.split(",") if n.strip()],
                        help=f"comma-separated, of: {', '.join(names)}")
    parser.add_argument("--out", type=Path, help="directory for each benchmark's JSON and log "
                        "(default: a new one in the system temp dir)")
    parser.add_argument("--against", metavar="REF", help="a git commit (or branch, tag) to measure in the "
                        "same run, built in a temporary venv; prints both figures and their ratio "
                        "(the original, the same for both, is then left out)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(names)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="omstream-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in steps() if (args.only is None or s.name in args.only)
              and not (args.against and s.name == "original")]
    began, start = time.strftime("%Y-%m-%d %H:%M %Z"), time.monotonic()
    if args.against:
        try:
            theirs = against.build(ROOT, args.against, out / "ref")
        except subprocess.CalledProcessError as exc:
            parser.error(f"cannot build {args.against}: {(exc.stderr or '').strip() or exc}")
        progress(f"{args.against} is {theirs.name}, built in {theirs.root.parent}")
        their_steps = run_against(chosen, theirs, out)
        report = comparison(chosen, their_steps, (against.here(ROOT).name, theirs.name), began,
                            time.monotonic() - start)
        done = [*chosen, *their_steps]
    else:
        for step in chosen:
            run_step(step, out)
        report = table(chosen, began, time.monotonic() - start)
        done = chosen
    (out / "table.txt").write_text(report + "\n")
    print(report)
    progress(f"each benchmark's output, JSON and log: {out}")
    return 1 if any(s.error for s in done) else 0


if __name__ == "__main__":
    sys.exit(main())
