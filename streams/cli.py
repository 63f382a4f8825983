"""`om`: the command line of omstream.  Every command has `--help`.

    om demo                    broker + worker + web + the demo conversation, offline
    om broker start|stop|status|jars
    om topics create
    om worker                  the Faust worker (fold + model agents)
    om serve                   the HTTP read side (context windows)
    om produce FILE.jsonl      send chat messages
    om tail                    print lifecycle events as they happen
    om schema export [--check] write (or check) the JSON Schema files of the wire types
    om config check [FILE]     validate observationalMemory options; print the resolved values
    om simulate CONV.jsonl     the engine over a conversation file, without a broker
    om observe|reflect THREAD  manual cycles, through the control topic
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import orjson

__all__ = ["main"]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _settings(args: argparse.Namespace):
    from .settings import load_settings

    return load_settings(args.config)


# --- broker -----------------------------------------------------------------------------------
def cmd_broker(args: argparse.Namespace) -> int:
    from omstream.infra.broker import BrokerError, ensure_jars

    from .processes import local_broker

    settings = _settings(args)
    broker = local_broker(settings)
    try:
        if args.action == "jars":
            print(ensure_jars(quiet=False))
        elif args.action == "start":
            if broker.pid() is None:
                broker.start()
            asyncio.run(broker.wait_ready())
            asyncio.run(_create_topics(settings))
            print(f"broker ready at {broker.bootstrap} (pid {broker.pid()}, data {broker.data_dir})")
        elif args.action == "stop":
            print("stopped" if broker.stop() else "not running")
        else:
            pid = broker.pid()
            print(f"running at {broker.bootstrap} (pid {pid})" if pid else "not running")
            return 0 if pid else 3
    except BrokerError as exc:
        print(f"om broker {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


async def _create_topics(settings) -> list[str]:
    from .topics import ensure_topics

    return await ensure_topics(settings)


def cmd_topics(args: argparse.Namespace) -> int:
    created = asyncio.run(_create_topics(_settings(args)))
    print("created: " + (", ".join(created) if created else "nothing (all present)"))
    return 0


# --- worker and web ---------------------------------------------------------------------------
def cmd_worker(args: argparse.Namespace) -> int:
    import faust

    from .logs import logging_config
    from .worker import build_app

    settings = _settings(args)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(_create_topics(settings))
    app = build_app(settings)
    worker = faust.Worker(app, loglevel=args.log_level, logging_config=logging_config(args.log_level.upper()))
    worker.execute_from_commandline()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from omstream.projections.web import serve

    from .logs import setup_logging

    setup_logging(args.log_level.upper())
    settings = _settings(args)
    print(f"serving on http://{settings.web_host}:{settings.web_port}", flush=True)
    try:
        asyncio.run(serve(settings))
    except KeyboardInterrupt:
        pass
    return 0


# --- producing and reading --------------------------------------------------------------------
async def produce_file(settings, path: Path) -> int:
    from .client import OmClient
    from .conversation import read_conversation

    messages = read_conversation(path)
    async with OmClient(settings) as client:
        return await client.send_messages(messages)


def cmd_produce(args: argparse.Namespace) -> int:
    settings = _settings(args)
    try:
        sent = asyncio.run(produce_file(settings, Path(args.file)))
    except (ValueError, FileNotFoundError) as exc:
        print(f"om produce: {exc}", file=sys.stderr)
        return 2
    print(f"sent {sent} messages to {settings.namespace}.messages")
    return 0


def describe_event(event) -> str:
    d = event.data
    kind = event.type.removeprefix("data-om-")
    head = f"{event.event_time:%H:%M:%S} {event.thread_id:<14} #{event.seq:<4} {kind:<20}"
    if kind == "status":
        m, o = d.windows.active.messages, d.windows.active.observations
        return f"{head} messages {m.tokens}/{m.threshold}  observations {o.tokens}/{o.threshold}  gen {d.generation_count}"
    if kind == "observation-start":
        return f"{head} {d.operation_type} of {d.tokens_to_observe} tokens"
    if kind == "observation-end":
        return f"{head} {d.operation_type}: {d.tokens_observed} tokens -> {d.observation_tokens} observation tokens"
    if kind == "buffering-start":
        return f"{head} {d.operation_type} of {d.tokens_to_buffer} tokens, in the background"
    if kind == "buffering-end":
        return f"{head} {d.operation_type}: {d.tokens_buffered} tokens -> {d.buffered_tokens} buffered"
    if kind == "activation":
        return (f"{head} {d.operation_type}: {d.tokens_activated} tokens -> {d.observation_tokens} "
                f"observation tokens ({d.triggered_by}, no model call)")
    if kind in ("observation-failed", "buffering-failed"):
        return f"{head} {d.operation_type}: {d.error}"
    if kind == "thread-update":
        return f"{head} title {d.old_title!r} -> {d.new_title!r}"
    return f"{head} {d.model_dump_json(by_alias=True)[:120]}"


async def tail(settings, *, thread: str | None, from_beginning: bool, as_json: bool,
               count: int | None, statuses: bool = True, out=sys.stdout) -> int:
    from aiokafka import AIOKafkaConsumer

    from omstream.schemas.codec import decode_event

    from .topics import Topics

    consumer = AIOKafkaConsumer(
        Topics(settings.namespace).events, bootstrap_servers=settings.bootstrap, group_id=None,
        auto_offset_reset="earliest" if from_beginning else "latest", enable_auto_commit=False)
    await consumer.start()
    seen = 0
    try:
        async for record in consumer:
            event = decode_event(record.value)
            if thread and event.thread_id != thread:
                continue
            if not statuses and event.type == "data-om-status":
                continue
            print(record.value.decode() if as_json else describe_event(event), file=out, flush=True)
            seen += 1
            if count is not None and seen >= count:
                break
    finally:
        await consumer.stop()
    return seen


def cmd_tail(args: argparse.Namespace) -> int:
    try:
        asyncio.run(tail(_settings(args), thread=args.thread, from_beginning=args.from_beginning,
                         as_json=args.json, count=args.count, statuses=not args.no_status))
    except KeyboardInterrupt:
        pass
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from omstream.schemas.config import load_om_config

    from .settings import read_config_file
    from .simulate import run

    try:
        options = args.options or args.config
        om = load_om_config(read_config_file(Path(options)) if options else True)
        summary = run(Path(args.conversation), om, out=args.out, parity=args.parity,
                      measured_time=args.measured_time, timeline=args.timeline)
    except (OSError, ValueError) as exc:
        print(f"om simulate: {exc}", file=sys.stderr)
        return 2
    print(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode(), file=sys.stderr)
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
        print(f"{result.out}: {len(result.unchanged)} files up to date")
        return 0
    for label, names in (("wrote", result.added), ("updated", result.changed), ("removed", result.removed)):
        for name in names:
            print(f"  {label:<8} {name}")
    print(f"{result.out}: {len(result.added)} new, {len(result.changed)} changed, "
          f"{len(result.removed)} removed, {len(result.unchanged)} unchanged")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """Exit 0 with the resolved options as JSON, or 1 with one `path: problem` line per error."""
    import os

    import yaml

    from omstream.schemas.config import OmConfigError, load_om_config

    from .settings import read_config_file

    path = args.file or args.config or os.environ.get("OM_CONFIG")
    if not path:
        print("om config check: name a file (or use --config / $OM_CONFIG)", file=sys.stderr)
        return 1
    try:
        om = load_om_config(read_config_file(Path(path)))
    except OmConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 1
    print(orjson.dumps(om.resolved().to_json(), option=orjson.OPT_INDENT_2).decode())
    return 0


def cmd_manual(args: argparse.Namespace) -> int:
    """`om observe` / `om reflect`: a command record on `<ns>.control`; the worker acts on it."""
    from .client import OmClient

    async def send() -> None:
        async with OmClient(_settings(args)) as client:
            if args.command == "observe":
                await client.observe(args.thread, resource_id=args.resource, request_id=args.request_id)
            else:
                await client.reflect(args.thread, prompt=args.prompt, resource_id=args.resource,
                                     request_id=args.request_id)

    asyncio.run(send())
    print(f"{args.command} requested for thread {args.thread}; follow it with `om tail`")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if args.config is None:
        args.config = str(EXAMPLES / "demo.toml")
    return run_demo(_settings(args), EXAMPLES / "demo-conversation.jsonl", stay=not args.exit)


# --- parser -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="om", description="omstream: Observational Memory on Kafka.")
    parser.add_argument("--config", help="settings file (.toml, .yaml, .json); default $OM_CONFIG")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="run broker, worker and web with the demo conversation (offline)")
    p.add_argument("--exit", action="store_true", help="stop everything once the demo has been shown")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("broker", help="the local Kafka broker (resolved from Maven Central)")
    p.add_argument("action", choices=["start", "stop", "status", "jars"])
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("topics", help="create the namespace's topics with their configs")
    p.add_argument("action", choices=["create"])
    p.set_defaults(func=cmd_topics)

    p = sub.add_parser("worker", help="run the Faust worker (fold and model agents)")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("serve", help="serve context windows over HTTP")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("produce", help="send chat messages from a JSON-lines file")
    p.add_argument("file", help="one message per line: {threadId, role, content, createdAt, ...}")
    p.set_defaults(func=cmd_produce)

    for name, text in (("observe", "observe a thread's unobserved messages now"),
                       ("reflect", "reflect a thread's observations now")):
        p = sub.add_parser(name, help=text)
        p.add_argument("thread", help="thread id")
        p.add_argument("--resource", help="resource id (needed in resource scope)")
        p.add_argument("--request-id", help="idempotency key: a command re-sent with it applies once")
        if name == "reflect":
            p.add_argument("--prompt", help="guidance for the reflector (SPECIFIC GUIDANCE)")
        p.set_defaults(func=cmd_manual)

    p = sub.add_parser("simulate", help="run the engine over a conversation file, without a broker")
    p.add_argument("conversation", help="JSON lines: {threadId, resourceId?, role, content, createdAt, id?}")
    # Its own dest, so `om --config FILE simulate ...` keeps working too.
    p.add_argument("--config", dest="options", help="observationalMemory options (JSON, TOML or YAML)")
    p.add_argument("--out", type=Path, help="write every emitted event as JSON lines here")
    p.add_argument("--parity", action="store_true",
                   help="count with tokenx and render dates in UTC, like the original")
    p.add_argument("--timeline", action="store_true", help="print status and cycle lines")
    p.add_argument("--measured-time", action="store_true",
                   help="keep the model calls' measured durations (the log is then not reproducible)")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("schema", help="JSON Schema files of every wire type")
    p.add_argument("action", choices=["export"])
    p.add_argument("--out", type=Path, help="output directory (default: schemas/json/ of the repository)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the files differ")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("config", help="check observationalMemory options and show the resolved values")
    p.add_argument("action", choices=["check"], help="check: print the resolved options as JSON "
                   "(exit 0), or every error as `option: problem and fix` on stderr (exit 1)")
    p.add_argument("file", nargs="?", help="JSON, TOML or YAML: a settings file, "
                   "{observationalMemory: {...}}, the bare options, or true/false (default: --config)")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("tail", help="print lifecycle events as they happen")
    p.add_argument("--thread", help="only this thread")
    p.add_argument("--from-beginning", action="store_true", help="start at the first event")
    p.add_argument("--json", action="store_true", help="print the raw JSON records")
    p.add_argument("--no-status", action="store_true", help="leave out data-om-status events")
    p.add_argument("--count", type=int, help="stop after this many events")
    p.set_defaults(func=cmd_tail)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
