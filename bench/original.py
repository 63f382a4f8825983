"""The original Observational Memory (`@mastra/memory`, Node.js) on the conversation omstream's
benches use, with instant scripted models: its messages/s, to compare omstream's against.

    python -m bench.original                  # 2,000 messages, buffering on and off, and the bare agent loop
    python -m bench.original --messages 400   # a quicker run

What runs
    `npm ci` in bench/original/ the first time (exact versions in its package-lock.json:
    @mastra/core 1.71.0, @mastra/memory 1.31.0, ai 5.0.0; node_modules is git-ignored), then
    `node bench/original/run.mjs` on the message bodies of `bench.e2e` (the same seed, ~200
    tokens under tokenx, written to a temporary JSON file).  run.mjs drives one thread as an
    agent loop does: per turn `agent.generate(user message)` on a Mastra `Agent` whose memory is
    `new Memory({observationalMemory: ...})` on `InMemoryStore`, its model a `MockLanguageModelV2`
    answering the next body at once, so each turn adds two messages and OM's processors run
    where they run for a user of the package (thresholds, buffering, activation and blocking
    observation before each step; the messages saved after it).  Observer and Reflector are mock
    models answering a fixed observation at once.  messageTokens 3000 as in bench.e2e, buffering
    at its default (bufferTokens 0.2) and off; the same agent loop without observational memory
    is the baseline that shows what the agent loop alone costs.

What is printed
    Per run: messages, seconds (wall, from the first timed turn until background buffering
    settled), messages/s, CPU seconds of the Node process, observer and reflector calls.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.e2e_env import Options
from bench.e2e_runs import Conversation

HERE = Path(__file__).resolve().parent / "original"


class OriginalUnavailable(RuntimeError):
    """The original could not be installed or run; the message says why."""


def ensure_installed() -> None:
    """node_modules from the lock file, unless there already."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise OriginalUnavailable("Node.js (node and npm) is not on PATH")
    if (HERE / "node_modules" / "@mastra" / "memory").is_dir():
        return
    done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(HERE)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise OriginalUnavailable(f"npm ci failed:\n{done.stderr[-2000:]}")


def run(messages: int = 2000, message_tokens: int = 3000, baseline: bool = True) -> dict[str, Any]:
    """The original's figures (run.mjs's JSON); raises OriginalUnavailable."""
    ensure_installed()
    bodies = Conversation(Options()).bodies
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="om-original-bodies-") as file:
        json.dump(bodies, file)
        file.flush()
        command = ["node", str(HERE / "run.mjs"), "--bodies", file.name, "--messages", str(messages),
                   "--message-tokens", str(message_tokens), *(["--baseline"] if baseline else [])]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=1800)
    if done.returncode:
        raise OriginalUnavailable(f"run.mjs exited with {done.returncode} (its stderr is above)")
    return json.loads(done.stdout.strip().splitlines()[-1])


def format_report(report: dict[str, Any]) -> str:
    head = ("run", "messages", "seconds", "messages/s", "CPU s", "observer calls", "reflector calls")
    rows = [(r["run"], f"{r['messages']:,}", f"{r['seconds']:.1f}", f"{r['messages_per_s']:.1f}",
             f"{r['cpu_seconds']:.1f}", str(r["observer_calls"]), str(r["reflector_calls"]))
            for r in report["runs"]]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    versions = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
    lines = [f"the original ({versions}; Node {report['node']}), one thread, messageTokens "
             f"{report['message_tokens']}, instant mock models"]
    for index, row in enumerate([head, *rows]):
        lines.append("  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.original", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages on the thread (default 2000)")
    parser.add_argument("--message-tokens", type=int, default=3000, help="observation.messageTokens")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="skip the agent loop without observational memory")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        report = run(args.messages, args.message_tokens, args.baseline)
    except (OriginalUnavailable, subprocess.TimeoutExpired) as exc:
        print(f"the original could not be run: {exc}", file=sys.stderr)
        if args.json:
            args.json.write_text(json.dumps({"error": str(exc)}))
        return 1
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
