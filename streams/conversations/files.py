"""Conversation files: JSON lines of input records, as `om produce` and `om simulate` read them.

The simple form is one chat message per line (`schemas/messages.py`); a message line without
`id` gets `<threadId>:<line number>`, so the same file always yields the same ids.  `turns`
replays such messages as the agent loop the scenarios were recorded with.

A line may also be any other record of the input log `<ns>.log` in its wire format (a line with
a `type`: `step-started`, `turn-ended`, `observe-requested`, `thread-patched`, ...): what
`om export` writes, so a thread's history keeps the producer's own steps, turn ends and
commands.  A `model-result` line is refused: results are what a run computes, not history, and
a simulation makes its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from omstream.schemas.codec import DecodeFailure, decode_input
from omstream.schemas.control import Control, StepStarted, TurnEnded
from omstream.schemas.jobs import ModelResult
from omstream.schemas.messages import Message

__all__ = ["ConversationRecord", "messages_of", "read_conversation", "turns"]

#: A line of a conversation file: a message, or an agent-loop marker or command.
ConversationRecord = Message | Control


def read_conversation(path: Path) -> list[ConversationRecord]:
    """The records of a file, in order; ValueError naming the line when one cannot be read."""
    records: list[ConversationRecord] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}:{number}: each line must be a JSON object")
        records.append(_record(data, f"{path}:{number}", number))
    return records


def _record(data: dict[str, Any], where: str, number: int) -> ConversationRecord:
    kind = data.get("type", "message")
    if kind == "message":
        return _message(data, where, number)
    if kind == "model-result":
        raise ValueError(f"{where}: a model-result line is not history (a simulation calls the "
                         "models itself); leave model results out of conversation files")
    # The log's own decoder: the same types, checks and reasons the worker applies.
    record = decode_input(orjson.dumps(data))
    if isinstance(record, DecodeFailure):
        raise ValueError(f"{where}: {record.reason}")
    assert not isinstance(record, (Message, ModelResult))  # `type` told them apart above
    return record


def _message(data: dict[str, Any], where: str, number: int) -> Message:
    data.setdefault("id", f"{data.get('threadId')}:{number}")
    try:
        return Message.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(f"{where}: {first['msg']} at {'.'.join(map(str, first['loc']))}") from None


def messages_of(records: Iterable[ConversationRecord]) -> list[Message]:
    """Just the chat messages of a conversation, in order."""
    return [record for record in records if isinstance(record, Message)]


def turns(records: Iterable[ConversationRecord]) -> Iterator[ConversationRecord]:
    """The inputs an agent loop produces: each user message opens a turn with step 0, and the
    turn ends before the thread's next user message (or after its last message).

    Records other than messages (commands) are passed through where they stand, so a manual
    `observe-requested` in a file of messages still applies after the messages before it."""
    last: dict[str, Message] = {}
    for record in records:
        if not isinstance(record, Message):
            yield record
            continue
        message = record
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
