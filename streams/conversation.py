"""Conversation files: JSON lines of chat messages, as `om produce` and `om simulate` read them.

Each line is one message in the wire format (`schemas/messages.py`); a line without `id` gets
`<threadId>:<line number>`, so the same file always yields the same ids.  `turns` replays the
messages as the agent loop the scenarios were recorded with.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson
from pydantic import ValidationError

from omstream.schemas.control import StepStarted, TurnEnded
from omstream.schemas.messages import Message

__all__ = ["read_conversation", "turns"]


def read_conversation(path: Path) -> list[Message]:
    """The messages of a file; ValueError naming the line when one cannot be read."""
    messages = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: each line must be a JSON object")
        record.setdefault("id", f"{record.get('threadId')}:{number}")
        try:
            messages.append(Message.model_validate(record))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ValueError(f"{path}:{number}: {first['msg']} at "
                             f"{'.'.join(map(str, first['loc']))}") from None
    return messages


def turns(messages: Iterable[Message]) -> Iterator[Message | StepStarted | TurnEnded]:
    """The inputs an agent loop produces: each user message opens a turn with step 0."""
    last: dict[str, Message] = {}
    for message in messages:
        previous = last.get(message.thread_id)
        if message.role == "user" and previous is not None and previous.role != "user":
            yield _turn_end(previous)
        yield message
        if message.role == "user":
            yield StepStarted(thread_id=message.thread_id, resource_id=message.resource_id,
                              step_number=0, at=message.created_at, after_message_id=message.id)
        last[message.thread_id] = message
    for message in last.values():
        yield _turn_end(message)


def _turn_end(message: Message) -> TurnEnded:
    return TurnEnded(thread_id=message.thread_id, resource_id=message.resource_id,
                     at=message.created_at, after_message_id=message.id)
