"""`om demo`: the whole path on one machine, with a real model that runs offline.

Starts (or reuses) the local broker, creates the topics, starts the worker and the web server
as child processes, produces the demo conversation, prints the lifecycle events until every
message is accounted for, then prints the context and dashboard URLs and keeps serving until Ctrl-C.

Each run has a namespace of its own (`demo-YYYYMMDD-HHMMSS`); the demo prints it with the exact
`om tail --namespace ...` line, and records it while it runs so that `om tail`, `om dlq` and
`om export` without a namespace of their own read it (`namespaces`).

The Observer and Reflector are `local/qwen2.5-1.5b` (installed on first use, 1.1 GB) unless
`--model` names another: a hosted litellm model (with its key in the environment), or
`scripted` for the deterministic scripted models the tests use.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..plural import plural
from .common import EXAMPLES, CommandError, CommandMaker, port_number, settings_of
from .namespaces import forget_demo, record_demo
from .tail import tail

if TYPE_CHECKING:
    from ..conversations.files import ConversationRecord
    from ..settings import Settings

__all__ = ["SCRIPTED", "add_commands", "demo_models", "follow_hint", "run_demo"]


def _get(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except OSError:
        return None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


SCRIPTED = ("scripted/observer", "scripted/reflector")


def demo_models(model: str | None) -> tuple[str, str]:
    """The demo's (observer, reflector): `--model` for both, the scripted pair for `scripted`,
    else the offline local model."""
    from ..models.local import DEFAULT_MODEL

    if model == "scripted":
        return SCRIPTED
    return (model, model) if model else (DEFAULT_MODEL, DEFAULT_MODEL)


def _with_models(settings: Settings, models: tuple[str, str]) -> Settings:
    """The settings with these models, written to a file the worker and web server read."""
    from omstream.schemas.config import load_om_config

    from ..settings import read_config_file

    data = read_config_file(settings.config_file) if settings.config_file else {}
    options = data.setdefault("observationalMemory", {})
    options.pop("model", None)
    options.setdefault("observation", {})["model"], options.setdefault("reflection", {})["model"] = models
    path = settings.data_dir / "demo-settings.json"
    path.write_text(json.dumps(data, indent=2))
    return replace(settings, om=load_om_config(options), config_file=path)


def _ensure_local(models: tuple[str, str]) -> None:
    from ..models import local

    for model in sorted(set(models)):
        if local.is_local(model) and not local.is_installed(model):
            try:
                local.install(model)
            except (OSError, ValueError, subprocess.CalledProcessError) as exc:
                raise CommandError(f"cannot install {model}: {exc}") from None


def run_demo(settings: Settings, conversation: Path, *, stay: bool, model: str | None = None) -> int:
    from ..conversations.files import read_conversation
    from ..processes import busy_ports, local_broker, start_child, stop_child
    from ..topics import ensure_topics

    broker = local_broker(settings)
    owned_broker = broker.pid() is None
    # Before anything starts: a taken port would otherwise surface minutes later as a worker or
    # web server that never comes up (or a stranger answering on the web port).
    busy = busy_ports(settings, broker=owned_broker)
    for reason in busy:
        print(reason, file=sys.stderr)
    if busy:
        return 1
    # Ctrl-C or SIGTERM stops what the demo started, even when a shell that started it in the
    # background left SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    # A fresh namespace per run: the broker keeps earlier runs' logs, and a demo must show its own.
    settings = replace(settings, namespace=f"{settings.namespace}-{time.strftime('%Y%m%d-%H%M%S')}")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    models = demo_models(model)
    settings = _with_models(settings, models)
    real = not models[0].startswith("scripted/")
    if models[0] == models[1] and models[0].startswith("local/"):
        print(f"models: {models[0]}, a real model running offline on this machine (no API key); "
              "for a hosted model: om demo --model openai/gpt-4o-mini (with OPENAI_API_KEY set)",
              flush=True)
    else:
        print(f"models: observer {models[0]}, reflector {models[1]}", flush=True)
    _ensure_local(models)
    print("1/5 resolving Kafka from Maven Central and starting the broker ...", flush=True)
    if owned_broker:
        broker.start()
    asyncio.run(broker.wait_ready())
    asyncio.run(ensure_topics(settings))
    base = f"http://{settings.web_host}:{settings.web_port}"
    # Readers started elsewhere find this run's namespace while it runs (`namespaces`).
    record_demo(settings, base)
    print(f"    broker ready at {broker.bootstrap}; namespace {settings.namespace}", flush=True)
    print(f"    from another shell, while the demo runs: {follow_hint(settings)}", flush=True)
    print("2/5 starting the worker and the web server ...", flush=True)
    worker_log = settings.data_dir / "worker.log"
    log_start = worker_log.stat().st_size if worker_log.exists() else 0
    children = [start_child(settings, "worker", worker_log),
                start_child(settings, "serve", settings.data_dir / "web.log")]
    try:
        deadline = time.monotonic() + 60
        while _get(f"{base}/healthz") is None:
            if time.monotonic() > deadline or any(c.poll() is not None for c in children):
                print(f"the web server did not come up; see {settings.data_dir / 'web.log'}", file=sys.stderr)
                return 1
            time.sleep(0.5)
        if not _worker_ready(worker_log, log_start, children[0]):
            print(f"the worker did not become ready; see {worker_log}", file=sys.stderr)
            return 1
        records = read_conversation(conversation)
        threads = sorted({m.thread_id for m in records if m.thread_id is not None})
        print(f"3/5 playing {plural(len(records), 'message')} of {plural(len(threads), 'thread')} as an agent loop "
              "(message, step, reply, turn end) ...", flush=True)
        asyncio.run(_play(settings, records))
        pace = ", one to four minutes a call on two idle cores, more on a busy machine"
        print(f"4/5 lifecycle events (the observer is {models[0]}"
              f"{pace if models[0].startswith('local/') else ''}):", flush=True)
        done = asyncio.run(_follow(settings, base, threads, len(records), patience=900 if real else 180))
        print(f"5/5 context windows{'' if done else ' (still settling)'}:")
        for thread in threads:
            ctx = _get(f"{base}/threads/{thread}/context?wait=0") or {}
            print(f"    {base}/threads/{thread}/context  -> "
                  f"{plural(len(ctx.get('observedMessageIds', [])), 'message')} observed, "
                  f"{len(ctx.get('messages', []))} raw")
            print(f"    {base}/threads/{thread}  (the dashboard: live, with a timeline)")
            if ctx.get("observations"):
                print(f"    observations ({models[0]}):")
                print("\n".join(f"      {line}" for line in ctx["observations"].splitlines()))
        if not stay:
            return 0 if done else 1
        print(f"serving the dashboard at {base}/ ; press Ctrl-C to stop the worker, the web server and the broker",
              flush=True)
        print(f"    meanwhile, from another shell: {follow_hint(settings)}", flush=True)
        while all(c.poll() is None for c in children):
            time.sleep(1)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        forget_demo()
        for child in children:
            stop_child(child)
        if owned_broker:
            broker.stop()


def follow_hint(settings: Settings) -> str:
    """The commands that read this run's namespace, as a user types them."""
    return (f"om tail (or om dlq list, om export --thread T) reads it; elsewhere, or after: "
            f"om tail --namespace {settings.namespace} --from-beginning "
            f"(or OM_NAMESPACE={settings.namespace})")


def _worker_ready(log: Path, start: int, worker: subprocess.Popen[bytes], timeout: float = 120) -> bool:
    """Wait until this run's worker can call models ("model agent ready": litellm imported), so
    the conversation is played to a live worker rather than queued for a cold one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker.poll() is None:
        with open(log, "rb") as f:
            f.seek(start)
            if b"model agent ready" in f.read():
                return True
        time.sleep(0.5)
    return False


async def _play(settings: Settings, messages: Sequence[ConversationRecord], pause: float = 0.6) -> None:
    """Play the conversation as an agent loop, pausing after each step so background buffering
    has time to work before the threshold is reached."""
    from ..client import OmClient

    async with OmClient(settings) as client:
        await client.play(messages, after_step=lambda _: asyncio.sleep(pause))


async def _follow(settings: Settings, base: str, threads: list[str], total: int, patience: float) -> bool:
    """Print events (as `om tail` does) until every message is observed or raw in a settled
    context (at most `patience` seconds)."""
    printer = asyncio.create_task(tail(settings, thread=None, from_beginning=True, as_json=False,
                                       count=None, statuses=False, messages=False))
    try:
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            await asyncio.sleep(1)
            found = [await asyncio.to_thread(_get, f"{base}/threads/{t}/context?wait=0") for t in threads]
            views = [v for v in found if v]
            if len(views) == len(found) and not any(v["blocked"] for v in views):
                seen = sum(len(v["observedMessageIds"]) + len(v["messages"]) for v in views)
                if seen == total and any(v["observedMessageIds"] for v in views):
                    await asyncio.sleep(1)
                    return True
        return False
    finally:
        printer.cancel()


def cmd_demo(args: argparse.Namespace) -> int:
    if args.config is None:
        args.config = str(EXAMPLES / "demo.toml")
    return run_demo(settings_of(args), EXAMPLES / "demo-conversation.jsonl", stay=not args.exit,
                    model=args.model)


def add_commands(command: CommandMaker) -> None:
    p = command("demo", help="run broker, worker and web with the demo conversation (offline, local model)",
                description="Run the local broker, a worker and the web server, play the demo conversation "
                "and print its lifecycle events, then serve the dashboard until Ctrl-C. Each run writes "
                "into a namespace of its own (demo-YYYYMMDD-HHMMSS), printed with the line that follows it "
                "from another shell; while the demo runs, om tail, om dlq and om export without a "
                "namespace of their own read the demo's.")
    p.add_argument("--exit", action="store_true", help="stop everything once the demo has been shown")
    p.add_argument("--port", type=port_number, help="web server port (default: omstream.web_port)")
    p.add_argument("--model", help="observer and reflector: a litellm model (its key in the "
                   "environment), or 'scripted' for the scripted test models (default: "
                   "local/qwen2.5-1.5b, offline, installed on first use)")
    p.set_defaults(func=cmd_demo)
