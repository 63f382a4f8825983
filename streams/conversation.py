"""Conversation files: JSON lines of chat messages, as `om produce` and `om simulate` read them.

Each line is one message in the wire format (`schemas/messages.py`); a line without `id` gets
`<threadId>:<line number>`, so the same file always yields the same ids.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import ValidationError

from schemas.messages import Message

__all__ = ["read_conversation"]


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
