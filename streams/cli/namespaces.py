"""Which namespace `om tail`, `om dlq` and `om export` read, and a clear refusal when it has no
such topic.

Every run of `om demo` writes into a namespace of its own (`demo-YYYYMMDD-HHMMSS`: the broker
keeps earlier runs' logs), so a reader started with no settings used to subscribe to `om.events`
and wait forever.  Now:

- `--namespace NS` names it; else `OM_NAMESPACE` or the settings file's `omstream.namespace`;
- else, while an `om demo` runs on the same broker, the demo's namespace: the demo records it
  (`demo_record`, a small JSON file in the user's state directory, removed when the demo stops)
  and the reader says on stderr which namespace it reads and how to choose another, so the
  choice is never silent;
- a topic that does not exist is refused at once, in one line naming the namespace, the topic and
  the namespaces the broker has (`om <command>: no topic ...`, exit 1): a reader never waits on a
  topic nobody writes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .common import CommandError, settings_of

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["NAMESPACE_HELP", "RunningDemo", "add_namespace_option", "demo_record", "forget_demo",
           "namespaces_on", "reading_settings", "record_demo", "require_topic", "running_demo"]

NAMESPACE_HELP = ("the namespace to read (default: OM_NAMESPACE or omstream.namespace; when neither "
                  "is set, the namespace of the om demo running on the same broker)")


def add_namespace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", metavar="NS", help=NAMESPACE_HELP)


# --- the running demo's record -----------------------------------------------------------------
@dataclass(frozen=True)
class RunningDemo:
    namespace: str
    bootstrap: str
    pid: int
    web: str


def demo_record() -> Path:
    """Where a running `om demo` records its namespace: per user, like the broker's port is per
    machine (`$XDG_STATE_HOME/omstream/demo.json`, default ~/.local/state)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "omstream" / "demo.json"


def record_demo(settings: Settings, web: str) -> None:
    """Record this process as the running demo of `settings.namespace`."""
    path = demo_record()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"namespace": settings.namespace, "bootstrap": settings.bootstrap, "pid": os.getpid(), "web": web,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    path.write_text(json.dumps(record) + "\n")


def forget_demo() -> None:
    """Remove the record, if it is this process's (a later demo may have replaced it)."""
    found = _read_record()
    if found is not None and found.pid == os.getpid():
        demo_record().unlink(missing_ok=True)


def running_demo(bootstrap: str) -> RunningDemo | None:
    """The demo running on this broker, if one is recorded and its process is alive."""
    found = _read_record()
    if found is None or found.bootstrap != bootstrap:
        return None
    try:
        os.kill(found.pid, 0)
    except ProcessLookupError:
        return None  # a demo that died without removing its record
    except PermissionError:
        pass  # alive, another user's
    return found


def _read_record() -> RunningDemo | None:
    try:
        data = json.loads(demo_record().read_text())
        return RunningDemo(str(data["namespace"]), str(data["bootstrap"]), int(data["pid"]), str(data.get("web", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


# --- the namespace a reader reads --------------------------------------------------------------
def reading_settings(args: argparse.Namespace) -> Settings:
    """The command's settings with the namespace it reads (see the module's docstring)."""
    from ..settings import NAMESPACE_NAME

    settings = settings_of(args)
    chosen = getattr(args, "namespace", None)
    if chosen is not None:
        if not NAMESPACE_NAME.fullmatch(chosen):
            raise CommandError(f"--namespace {chosen!r}: not a namespace name (letters, digits, '.', '_', '-')")
        return replace(settings, namespace=chosen)
    if _configured(args):
        return settings
    demo = running_demo(settings.bootstrap)
    if demo is None:
        return settings
    print(f"om {args.command}: reading namespace {demo.namespace} of the running om demo (pid {demo.pid}); "
          "--namespace NS or OM_NAMESPACE for another", file=sys.stderr, flush=True)
    return replace(settings, namespace=demo.namespace)


def _configured(args: argparse.Namespace) -> bool:
    """Whether the environment or the settings file names a namespace."""
    from ..settings import CONFIG_ENV, RUNTIME_TABLE, read_config_file

    if "OM_NAMESPACE" in os.environ:
        return True
    path = args.config or os.environ.get(CONFIG_ENV)
    if not path:
        return False
    data = read_config_file(Path(path))  # readable: settings_of read it already
    table = data.get(RUNTIME_TABLE) if isinstance(data, dict) else None
    return isinstance(table, dict) and "namespace" in table


# --- a topic that must exist -------------------------------------------------------------------
async def namespaces_on(bootstrap: str) -> list[str]:
    """The namespaces the broker has (each has its `<ns>.log`), newest demo run first."""
    from .. import kafka

    admin = kafka.admin(bootstrap, request_timeout_ms=kafka.TOPICS_TIMEOUT_MS)
    await admin.start()
    try:
        topics = await admin.list_topics()
    finally:
        await admin.close()
    names = sorted((t.removesuffix(".log") for t in topics if t.endswith(".log") and not t.startswith("__")),
                   reverse=True)  # demo-YYYYMMDD-HHMMSS: the newest run first
    return names


async def require_topic(settings: Settings, topic: str, command: str) -> list[int]:
    """The topic's partitions; `CommandError` in one line when the broker has no such topic,
    naming the namespace, the topic and how to choose a namespace the broker has (`command`: the
    command as the user would type it again, `dlq list` say)."""
    from ..topics import Topics, partitions_of

    layout = await partitions_of(settings.bootstrap, [topic])
    if layout.get(topic):
        return layout[topic]
    namespace = settings.namespace
    where = f"no topic {topic} in namespace {namespace!r} on {settings.bootstrap}"
    log = Topics(namespace).log
    if log != topic and (await partitions_of(settings.bootstrap, [log])).get(log):
        raise CommandError(f"{where}: the namespace has no version {settings.version!r} (om versions lists "
                           "them; choose one with --version)")
    known = await namespaces_on(settings.bootstrap)
    demo = running_demo(settings.bootstrap)
    if demo is not None and demo.namespace in known:
        choice = f"the running om demo's is {demo.namespace}: om {command} --namespace {demo.namespace}"
    elif known:
        shown = ", ".join(known[:5]) + (f" and {len(known) - 5} more" if len(known) > 5 else "")
        choice = f"namespaces there: {shown}; choose one with --namespace NS or OM_NAMESPACE"
    else:
        choice = "the broker has no namespace yet: om demo, or om topics create (and om produce)"
    raise CommandError(f"{where}; {choice}")
