"""`om broker start|stop|status|jars` and `om topics create`: the local broker and the topics."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from .common import CommandMaker, settings_of

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["add_commands", "create_topics"]


def cmd_broker(args: argparse.Namespace) -> int:
    from omstream.infra.broker import ensure_jars

    from ..processes import local_broker

    settings = settings_of(args)
    broker = local_broker(settings)
    if args.action == "jars":
        print(ensure_jars(quiet=False))
    elif args.action == "start":
        if broker.pid() is None:
            broker.start()
        asyncio.run(broker.wait_ready())
        asyncio.run(create_topics(settings))
        print(f"broker ready at {broker.bootstrap} (pid {broker.pid()}, data {broker.data_dir})")
    elif args.action == "stop":
        print("stopped" if broker.stop() else "not running")
    else:
        pid = broker.pid()
        print(f"running at {broker.bootstrap} (pid {pid})" if pid else "not running")
        return 0 if pid else 3
    return 0


async def create_topics(settings: Settings) -> list[str]:
    from ..topics import ensure_topics

    return await ensure_topics(settings)


def cmd_topics(args: argparse.Namespace) -> int:
    created = asyncio.run(create_topics(settings_of(args)))
    print("created: " + (", ".join(created) if created else "nothing (all present)"))
    return 0


def add_commands(command: CommandMaker) -> None:
    p = command("broker", help="start, stop or check the local Kafka broker (resolved from Maven Central)",
                description="The single-node Kafka broker om runs on this machine (KRaft, no ZooKeeper), "
                "on omstream.broker_port / OM_BROKER_PORT, its data in omstream.data_dir. Java is needed; "
                "the Kafka jars are resolved from Maven Central on first use.")
    p.add_argument("action", choices=["start", "stop", "status", "jars"], metavar="ACTION",
                   help="start: start it (if not running) and create the namespace's topics; stop; "
                   "status: running or not (exit 3 when not); jars: resolve the Kafka jars and print where")
    p.set_defaults(func=cmd_broker)

    p = command("topics", help="create the namespace's Kafka topics (log, jobs, events, dlq, ...) if missing",
                description="Create the topics of omstream.namespace / OM_NAMESPACE (<ns>.log, <ns>.jobs, "
                "<ns>.events, <ns>.dlq and the others) with their partition counts and configs; existing "
                "ones are checked, not changed. om worker and om broker start do this too.")
    p.add_argument("action", choices=["create"], metavar="ACTION", help="create: create the missing topics")
    p.set_defaults(func=cmd_topics)
