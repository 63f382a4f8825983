"""`om dlq list|show|resend`: the records the worker refused, why, and sending a fixed one again.

A dead letter is named by its own position in the dead-letter topic, `PARTITION:OFFSET`, as
`om dlq list` prints it.  `resend` sends the original record (or the fixed one of `--file`) to
`<ns>.log` the way `om produce` does (`OmClient`, keyed by the memory key), after checking it
as the worker will: a record that still does not decode, or still breaks a size limit, is
refused here with the reason, and nothing is sent.

In a namespace with a key, `show` opens a sealed record when its key is alive, and otherwise
shows it as it is, saying why (`opened_record`): a deleted memory's record stays ciphertext.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..plural import plural
from .common import EXIT_INPUT, CommandError, CommandMaker, version_name
from .namespaces import add_namespace_option, reading_settings, require_topic

if TYPE_CHECKING:
    from omstream.schemas.dead_letters import DeadLetter

    from ..settings import Settings

__all__ = ["Letter", "add_commands", "read_letters"]


@dataclass(frozen=True)
class Letter:
    """A dead letter and where it is in the dead-letter topic."""

    partition: int
    offset: int
    letter: DeadLetter

    @property
    def position(self) -> str:
        return f"{self.partition}:{self.offset}"

    @property
    def thread_id(self) -> str | None:
        """The refused record's thread: from the record when it decodes, else from its JSON, else
        from a `thread:` key."""
        from omstream.schemas.codec import DecodeFailure, decode_input

        raw = self.letter.original()
        record = decode_input(raw)
        if not isinstance(record, DecodeFailure):
            return getattr(record, "thread_id", None)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("threadId"), str):
            return str(data["threadId"])
        key = self.letter.key or ""
        return key.split(":", 1)[1] if key.startswith("thread:") else None

    def summary(self) -> dict[str, Any]:
        return {"position": self.position, "threadId": self.thread_id, **self.letter.wire()}


def _dlq_topic(settings: Settings, version: str | None) -> str:
    from ..topics import Topics

    return (Topics(settings.namespace, version) if version else Topics.of(settings)).dlq


async def read_letters(settings: Settings, version: str | None = None) -> list[Letter]:
    """Every dead letter of the version's topic, each partition's in order; a record that is not
    a dead letter is skipped (nothing the worker writes)."""
    from pydantic import ValidationError

    from omstream.schemas.dead_letters import DeadLetter

    from ..topics import read_until_end

    topic = _dlq_topic(settings, version)
    partitions = await require_topic(replace(settings, version=version) if version else settings, topic, "dlq list")
    letters = []
    async for record in read_until_end(settings.bootstrap, topic, partitions):
        try:
            letters.append(Letter(record.partition, record.offset, DeadLetter.model_validate_json(record.value or b"")))
        except ValidationError:
            continue
    return letters


def _position(text: str) -> tuple[int, int]:
    """An argparse type: a dead letter's `PARTITION:OFFSET`."""
    partition, sep, offset = text.partition(":")
    if not sep or not partition.isdigit() or not offset.isdigit():
        raise argparse.ArgumentTypeError(f"expected PARTITION:OFFSET of the dead letter (as om dlq list "
                                         f"prints it), got {text!r}")
    return int(partition), int(offset)


def _find(settings: Settings, args: argparse.Namespace) -> Letter:
    wanted = args.position
    found = [x for x in asyncio.run(read_letters(settings, args.version)) if (x.partition, x.offset) == wanted]
    if not found:
        raise CommandError(f"no dead letter at {wanted[0]}:{wanted[1]} of {_dlq_topic(settings, args.version)} "
                           "(om dlq list shows them)", EXIT_INPUT)
    return found[0]


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def cmd_list(args: argparse.Namespace) -> int:
    settings = reading_settings(args)
    letters = [x for x in asyncio.run(read_letters(settings, args.version))
               if (args.code is None or x.letter.code == args.code)
               and (args.thread is None or x.thread_id == args.thread)]
    for x in letters:
        if args.json:
            print(orjson.dumps(x.summary()).decode())
        else:
            source = x.letter.source
            print(f"{x.position:<8} {x.letter.code:<16} {x.thread_id or '-':<20} "
                  f"{source.topic}@{source.partition}:{source.offset}  {_one_line(x.letter.reason, 100)}")
    if not args.json:
        print(plural(len(letters), "dead letter"), flush=True)
    return 0


def _record_view(raw: bytes) -> dict[str, Any]:
    """The refused record as a reader wants it: decoded when it decodes, else its text or base64."""
    from omstream.schemas.codec import DecodeFailure, decode_input

    record = decode_input(raw)
    if not isinstance(record, DecodeFailure):
        return {"decoded": record.wire()}
    try:
        return {"decodes": False, "why": record.reason, "text": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"decodes": False, "why": record.reason, "base64": base64.b64encode(raw).decode()}


async def opened_record(settings: Settings, raw: bytes, key: str | None) -> tuple[bytes, str | None]:
    """The record opened with the namespace's keys, and None; or, when it cannot be opened,
    `raw` itself and why (`shredded`, `tampered`, `no-key`).  An unsealed record: `raw`, None."""
    from omstream.crypto.opening import NO_KEY, Opener
    from omstream.crypto.sealing import is_marked, sealer_of

    if not is_marked(raw):
        return raw, None
    sealer = sealer_of(settings, repair=False)
    if not sealer.enabled:
        return raw, NO_KEY
    await sealer.start()
    try:
        opener = Opener(sealer)
        await opener.prepare([raw])
        opened = opener.open(raw, key)
    finally:
        await sealer.stop()
    return (raw, next(iter(opener.passed))) if opened is None else (opened, None)


def cmd_show(args: argparse.Namespace) -> int:
    settings = reading_settings(args)
    x = _find(settings, args)
    raw, sealed = asyncio.run(opened_record(settings, x.letter.original(), x.letter.key))
    view = {**x.summary(), "record": _record_view(raw)}
    if sealed is not None:
        view["sealed"] = sealed  # shown as it is: its key was shredded, or it does not authenticate
    view.pop("value")
    if args.json:
        print(orjson.dumps(view).decode())
        return 0
    source = x.letter.source
    print(f"dead letter {x.position} of {_dlq_topic(settings, args.version)}")
    print(f"code:    {x.letter.code}")
    print(f"reason:  {x.letter.reason}")
    print(f"source:  {source.topic} partition {source.partition} offset {source.offset}")
    print(f"key:     {x.letter.key}")
    print(f"thread:  {x.thread_id or '-'}")
    if sealed is not None:
        print(f"sealed:  {sealed} (its content cannot be opened: shown as it is)")
    record = view["record"]
    if "decoded" in record:
        print("record (decodes):")
        print(orjson.dumps(record["decoded"], option=orjson.OPT_INDENT_2).decode())
    elif "text" in record:
        print(f"record (does not decode: {record['why']}), as text:")
        print(record["text"])
    else:
        print(f"record (does not decode: {record['why']}), base64:")
        print(record["base64"])
    return 0


def checked_record(raw: bytes, settings: Settings) -> Any:
    """The record to resend, decoded; `CommandError` with the reason the worker would give
    (the client's own check before sending, `omstream.client.outgoing`)."""
    from omstream.schemas.codec import decode_input
    from omstream.schemas.jobs import ModelResult

    from ..client.outgoing import RefusedRecord, check_outgoing

    try:
        check_outgoing(settings, raw)
    except RefusedRecord as refused:
        raise CommandError(f"the record would be refused again ({refused.code}): {refused.reason}; nothing sent",
                           EXIT_INPUT) from None
    record = decode_input(raw)
    if isinstance(record, ModelResult):
        raise CommandError("a model result is sent only by the model agents, signed; nothing sent", EXIT_INPUT)
    return record


async def _send(settings: Settings, record: Any) -> Any:
    from omstream.schemas.messages import Message

    from ..client import OmClient

    async with OmClient(settings) as client:
        if isinstance(record, Message):
            return (await client.send_messages([record]))[0]
        return await client.send_control(record)


def cmd_resend(args: argparse.Namespace) -> int:
    from ..topics import Topics

    settings = reading_settings(args)
    x = _find(settings, args)
    log_topic = Topics.of(settings).log
    if x.letter.source.topic != log_topic:
        raise CommandError(f"dead letter {x.position} is a record of {x.letter.source.topic}, not of the input "
                           f"log {log_topic}: only log records are resent", EXIT_INPUT)
    if args.file:
        try:
            raw = Path(args.file).read_bytes().strip()
        except OSError as exc:
            raise CommandError(f"{args.file}: {exc.strerror or exc}", EXIT_INPUT) from None
    else:
        raw = x.letter.original()
    record = checked_record(raw, settings)
    position = asyncio.run(_send(settings, record))
    print(f"resent dead letter {x.position} ({x.letter.code}) {'fixed from ' + args.file if args.file else 'as it was'}"
          f" to {log_topic} at {position} (thread {getattr(record, 'thread_id', None) or '-'})")
    return 0


def add_commands(command: CommandMaker) -> None:
    p = command("dlq", help="the records the worker refused: list, show, resend",
                description="The dead letters of <ns>.dlq (or a version's <ns>.v.NAME.dlq): every record "
                "the worker refused, with its code, the reason and the original bytes.")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, **kwargs)
        # The global options once more, after the action (SUPPRESS: the top-level value stays).
        sub.add_argument("--config", default=argparse.SUPPRESS, help="settings file; default $OM_CONFIG")
        sub.add_argument("--log-level", default=argparse.SUPPRESS, choices=["debug", "info", "warning", "error"])
        sub.add_argument("--version", type=version_name, help="the memory version whose dead letters to read "
                         "(default: omstream.version, normally live)")
        add_namespace_option(sub)
        return sub

    from typing import get_args

    from omstream.schemas.dead_letters import DeadLetterCode

    codes = sorted(get_args(DeadLetterCode))
    s = action("list", help="one line per dead letter: position, code, thread, source, reason",
               description="List the dead letters in the topic's order, each partition's in turn. "
               "POSITION (the first column) names one for om dlq show and om dlq resend.")
    s.add_argument("--code", choices=codes, metavar="CODE", help=f"only this code ({', '.join(codes)})")
    s.add_argument("--thread", help="only the records of this thread")
    s.add_argument("--json", action="store_true", help="one JSON object per line (the dead letter, its "
                   "position and thread)")
    s.set_defaults(func=cmd_list)

    s = action("show", help="one dead letter: code, reason, source position and the record",
               description="Show a dead letter: its code and reason, where the refused record was, and "
               "the record, decoded when it decodes, otherwise its text or (not UTF-8) base64.")
    s.add_argument("position", type=_position, metavar="POSITION", help="PARTITION:OFFSET, as om dlq list prints it")
    s.add_argument("--json", action="store_true", help="as one JSON object")
    s.set_defaults(func=cmd_show)

    s = action("resend", help="send the refused record, or a fixed one, to the input log again",
               description="Send the dead letter's record (or the fixed record of --file) to <ns>.log, "
               "keyed by its memory key, as om produce does. It is checked first as the worker will "
               "check it (decoding, size, depth, parts, text length, createdAt against now): a record "
               "that would be refused again is not sent (exit status 2). Model results are never "
               "resent (only the model agents sign them).")
    s.add_argument("position", type=_position, metavar="POSITION", help="PARTITION:OFFSET, as om dlq list prints it")
    s.add_argument("--file", metavar="FIXED.json", help="the fixed record: one JSON object")
    s.set_defaults(func=cmd_resend)
