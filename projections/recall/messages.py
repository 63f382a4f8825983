"""`mode: "messages"` (spec §12): a thread read from its start or end (`anchor`), pages before or
after a message (`cursor`, `page` ±), and one part read whole, in chunks (`partIndex`,
`charOffset`).

Paging is by `createdAt`: forward pages read the messages after the cursor's, oldest first;
backward pages the ones before it, each page shown oldest first too.  A message with nothing to
show (only `data-*` parts) takes no slot on a page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from omstream.engine.prompting.groups import split_range
from omstream.schemas.messages import Message

from .params import RecallError
from .parts import RecallPart, chunk_text, is_visible, message_parts
from .render import MAX_RESULT_TOKENS, render_parts
from .source import RecallSource

__all__ = ["Listing", "Paging", "browse", "page_from_cursor", "range_hint", "read_part"]

MAX_PAGE, MAX_LIMIT = 50, 20


@dataclass(frozen=True)
class Listing:
    """What to show of a page: the detail level and the part filters."""

    detail: str = "low"
    part_type: str | None = None
    tool_name: str | None = None

    def parts(self, messages: list[Message], source: RecallSource) -> list[RecallPart]:
        found = [p for m in messages for p in message_parts(m, self.detail, source.counter)]
        if self.tool_name:
            found = [p for p in found if p.type in ("tool-call", "tool-result") and p.tool_name == self.tool_name]
        if self.part_type:
            found = [p for p in found if p.type == self.part_type]
        return found


@dataclass(frozen=True)
class Paging:
    page: int
    limit: int


def _limit(limit: int | None) -> int:
    return min(max(limit or MAX_LIMIT, 1), MAX_LIMIT)


_RANGE = re.compile(r"^[^,\s]+:[^,\s]+(?:\s*,\s*[^,\s]+:[^,\s]+)*$")


def range_hint(cursor: str) -> str | None:
    """The hint for a cursor that is a range (`a:b`, or `a:b,c:d`) rather than one message id."""
    text = cursor.strip()
    if not _RANGE.match(text):
        return None
    segments = [s.strip() for s in text.split(",")]
    start, end = split_range(segments[0])[0], split_range(segments[-1])[1]
    return (f'The cursor "{cursor}" looks like a range. Use one of the individual message IDs as the cursor '
            f'instead: start="{start}" or end="{end}".')


def _answer(text: str, count: int, cursor: str, paging: Paging, listing: Listing, *, has_next: bool,
            has_prev: bool, truncated: bool = False, token_offset: int = 0) -> dict[str, Any]:
    return {"messages": text, "count": count, "cursor": cursor, "page": paging.page, "limit": paging.limit,
            "detail": listing.detail, "hasNextPage": has_next, "hasPrevPage": has_prev,
            "truncated": truncated, "tokenOffset": token_offset}


def _times(messages: list[Message]) -> dict[str, datetime]:
    return {m.id: m.created_at for m in messages}


def browse(source: RecallSource, thread_id: str, *, page: int | None, limit: int | None, listing: Listing,
           anchor: str = "start") -> dict[str, Any]:
    """The thread from its start (oldest first) or its end (page 1 = the newest messages)."""
    paging = Paging(min(max(page or 1, 1), MAX_PAGE), _limit(limit))
    visible = [m for m in source.messages(thread_id) if is_visible(m)]
    skip = (paging.page - 1) * paging.limit
    if anchor == "end":
        end = len(visible) - skip
        chosen = visible[max(end - paging.limit, 0):max(end, 0)]
        more = end - paging.limit > 0
        has_next, has_prev = (paging.page > 1, more) if chosen else (False, paging.page > 1)
    else:
        chosen = visible[skip:skip + paging.limit]
        more = len(visible) > skip + len(chosen)
        has_next, has_prev = (more, paging.page > 1) if chosen else (False, paging.page > 1)
    parts = listing.parts(chosen, source)
    rendered = render_parts(parts, _times(chosen), source.counter)
    if not chosen:
        empty = (f"(no messages found on page {paging.page} for this thread)" if paging.page > 1
                 else "(no messages in this thread)")
    else:
        empty = "(no message parts matched the current filters)" if listing.part_type or listing.tool_name \
            else "(no messages found)"
    return _answer(rendered.text or empty, len(chosen), chosen[0].id if chosen else "", paging, listing,
                   has_next=has_next, has_prev=has_prev, truncated=rendered.truncated,
                   token_offset=rendered.token_offset)


def page_from_cursor(source: RecallSource, anchor: Message, cursor: str, *, page: int | None, limit: int | None,
                     listing: Listing) -> dict[str, Any]:
    """Page `page` after (`page` > 0) or before (< 0) the cursor's message, in its thread."""
    raw = 1 if not page else page
    paging = Paging(max(min(raw, MAX_PAGE), -MAX_PAGE), _limit(limit))
    forward = paging.page > 0
    index = abs(paging.page) - 1
    skip = index * paging.limit
    visible = [m for m in source.messages(anchor.thread_id) if is_visible(m)]
    if forward:
        later = [m for m in visible if m.created_at > anchor.created_at]
        chosen = later[skip:skip + paging.limit]
        more = len(later) > skip + paging.limit
        has_next, has_prev = more, index > 0
    else:
        earlier = [m for m in visible if m.created_at < anchor.created_at]
        end = len(earlier) - skip
        chosen = earlier[max(end - paging.limit, 0):max(end, 0)]
        more = len(earlier) > skip + paging.limit
        has_next, has_prev = index > 0, more
    parts = listing.parts(chosen, source)
    times = _times(chosen)
    if listing.detail == "high" and parts:
        return _one_part(source, parts, times, cursor, paging, listing, has_next=has_next, has_prev=has_prev)
    rendered = render_parts(parts, times, source.counter)
    if parts:
        empty = "(no messages found)"
    else:
        empty = ("(no message parts matched the current filters)" if listing.part_type or listing.tool_name
                 else "(no visible message parts found for this page)")
    return _answer(rendered.text or empty, len(chosen), cursor, paging, listing, has_next=has_next,
                   has_prev=has_prev, truncated=rendered.truncated, token_offset=rendered.token_offset)


def _one_part(source: RecallSource, parts: list[RecallPart], times: dict[str, datetime], cursor: str,
              paging: Paging, listing: Listing, *, has_next: bool, has_prev: bool) -> dict[str, Any]:
    """High detail: the first part in full, and how to reach the next one."""
    first = parts[0]
    same = [p for p in parts if p.message_id == first.message_id]
    others = [p for p in parts if p.message_id != first.message_id]
    rendered = render_parts([first], times, source.counter)
    hints = []
    if len(same) > 1:
        hints.append(f'next part: partIndex={same[1].part_index} on cursor="{first.message_id}"')
    if others:
        hints.append(f'next message: partIndex={others[0].part_index} on cursor="{others[0].message_id}"')
    elif has_next:
        hints.append(f"more messages available on page {paging.page + 1}")
    text = rendered.text
    if hints:
        text += f"\n\nHigh detail returns 1 part at a time. To continue: {', or '.join(hints)}."
    return _answer(text, 1, cursor, paging, listing, has_next=bool(others) or has_next, has_prev=has_prev,
                   truncated=rendered.truncated, token_offset=rendered.token_offset)


def _continue_note(message_id: str, part_index: int, offset: int | None) -> str | None:
    if offset is None:
        return None
    return (f'To continue this part, call recall cursor="{message_id}" partIndex={part_index} detail="high" '
            f"charOffset={offset}.")


def read_part(source: RecallSource, message: Message, part_index: int, char_offset: int | None,
              budget: int = MAX_RESULT_TOKENS) -> dict[str, Any]:
    """One part of the message at high detail, the piece of it from `char_offset` that fits the
    budget; past the message's last part, the first part of the next message shown."""
    parts = message_parts(message, "high", source.counter)
    if not parts:
        raise RecallError(f"Message {message.id} has no visible content (it may be an internal system message). "
                          "Try a neighboring message ID instead.")
    target = next((p for p in reversed(parts) if p.part_index == part_index), None)
    note_prefix = ""
    asked_id = message.id
    if target is None:
        following = None
        if part_index > max(p.part_index for p in parts):
            following = next((m for m in source.messages(message.thread_id)
                              if m.created_at > message.created_at and is_visible(m)), None)
        if following is None:
            available = ", ".join(str(p.part_index) for p in parts)
            raise RecallError(f"Part index {part_index} not found in message {message.id}. "
                              f"Available indices: {available}")
        target = message_parts(following, "high", source.counter)[0]
        note_prefix = (f"Part index {part_index} not found in message {message.id}; showing partIndex "
                       f"{target.part_index} from next message {target.message_id}.\n\n")
    chunk = chunk_text(note_prefix + target.text, budget, source.counter, char_offset or 0)
    # Continuing a fallback repeats the call that led to it, so the prefix stays where it was.
    note = (_continue_note(asked_id, part_index, chunk.next_char_offset) if note_prefix
            else _continue_note(target.message_id, target.part_index, chunk.next_char_offset))
    answer: dict[str, Any] = {
        "text": chunk.text, "messageId": target.message_id, "partIndex": target.part_index, "role": target.role,
        "type": target.type, "truncated": chunk.truncated, "charOffset": chunk.char_offset,
    }
    if chunk.next_char_offset is not None:
        answer["nextCharOffset"] = chunk.next_char_offset
    if note is not None:
        answer["note"] = note
    return answer
