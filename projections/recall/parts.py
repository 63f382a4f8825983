"""A message as recall shows it: its parts, numbered by their position in the message (`[p0]`,
`[p1]`, ...), each as a line of text; at low detail each part shortened to its budget with the
hint to fetch it whole; and a single part read in chunks of the budget (`charOffset`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from omstream.engine.rules.tokens import Counter, format_tool_result, js_json, tool_result_value
from omstream.schemas.messages import (
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

__all__ = ["HIGH_DETAIL_TOOL_RESULT_TOKENS", "PartChunk", "RecallPart", "chunk_text", "format_timestamp",
           "is_visible", "message_parts", "part_hint", "truncate_tokens"]

#: Per-part budgets at low detail (tokens): text, tool calls and results, anything else.
LOW_TEXT_TOKENS, LOW_TOOL_TOKENS, LOW_OTHER_TOKENS = 100, 20, 30
#: A tool result is shown up to this many tokens even at high detail.
HIGH_DETAIL_TOOL_RESULT_TOKENS = 4000


@dataclass(frozen=True)
class RecallPart:
    message_id: str
    part_index: int
    role: str
    type: str
    text: str       # as shown (shortened at low detail)
    full_text: str  # whole
    tool_name: str | None = None


def format_timestamp(at: datetime) -> str:
    """`2025-03-03 09:00:00Z`: the time in UTC, to the second."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def part_hint(message_id: str, part_index: int) -> str:
    return f'recall cursor="{message_id}" partIndex={part_index} detail="high"'


def _prefix(text: str, tokens: int, counter: Counter) -> str:
    """The longest prefix of `text` within `tokens` (found by bisection: counting is monotone
    enough in the prefix length, and a few dozen counts of a part are cheap)."""
    low, high, best = 0, len(text), ""
    while low <= high:
        mid = (low + high) // 2
        candidate = text[:mid]
        if counter.count(candidate) <= tokens:
            best, low = candidate, mid + 1
        else:
            high = mid - 1
    return best


def truncate_tokens(text: str, tokens: int, counter: Counter, hint: str | None = None) -> tuple[str, bool]:
    """`text` cut to `tokens` (with ` [<hint> for more]` when cut); and whether it was cut."""
    if counter.count(text) <= tokens:
        return text, False
    return _prefix(text, tokens, counter) + (f" [{hint} for more]" if hint else ""), True


@dataclass(frozen=True)
class PartChunk:
    text: str
    char_offset: int
    next_char_offset: int | None
    truncated: bool


def chunk_text(text: str, tokens: int, counter: Counter, char_offset: int = 0) -> PartChunk:
    """The piece of `text` from `char_offset` that fits `tokens`; `next_char_offset` is where the
    next call goes on (None when this piece reaches the end)."""
    start = max(0, min(char_offset, len(text)))
    rest = text[start:]
    if not rest or counter.count(rest) <= tokens:
        return PartChunk(rest, start, None, False)
    piece = _prefix(rest, tokens, counter) or rest[:1]  # always progress, even past the budget
    following = start + len(piece)
    return PartChunk(piece, start, following, following < len(text))


def _low_limit(kind: str) -> int:
    if kind == "text":
        return LOW_TEXT_TOKENS
    if kind in ("tool-call", "tool-result"):
        return LOW_TOOL_TOKENS
    return LOW_OTHER_TOKENS


def is_visible(message: Message) -> bool:
    """Whether the message shows anything: a message of `data-*` parts only takes no page slot."""
    if isinstance(message.content, str):
        return bool(message.content)
    return any(not part.type.startswith("data-") for part in message.content)


def _tool_call_text(part: ToolCallPart, high: bool) -> str:
    if not high:
        return f"[Tool Call: {part.tool_name}]"
    args = part.args if isinstance(part.args, str) else js_json(part.args, indent=2)
    return f"[Tool Call: {part.tool_name}]\n{args}"


def _part_text(part: object, high: bool, counter: Counter) -> tuple[str, str, str | None] | None:
    """(type, full text, tool name) of one part; None for a part recall does not show."""
    if isinstance(part, TextPart):
        return ("text", part.text, None) if part.text else None
    if isinstance(part, ReasoningPart):
        return ("reasoning", part.text, None) if part.text else None
    if isinstance(part, ToolCallPart):
        return "tool-call", _tool_call_text(part, high), part.tool_name
    if isinstance(part, ToolResultPart):
        value, _ = tool_result_value(part)
        shown, _ = truncate_tokens(format_tool_result(value), HIGH_DETAIL_TOOL_RESULT_TOKENS, counter)
        return "tool-result", f"[Tool Result: {part.tool_name}]\n{shown}", part.tool_name
    if isinstance(part, ImagePart | FilePart):
        label = "Image" if isinstance(part, ImagePart) else "File"
        return part.type, f"[{label}{': ' + part.filename if part.filename else ''}]", None
    kind = str(getattr(part, "type", ""))
    if not kind or kind.startswith("data-"):
        return None
    return kind, f"[{kind}]", None


def message_parts(message: Message, detail: str, counter: Counter) -> list[RecallPart]:
    """The message's shown parts; at low detail text-like parts are cut to their budget (tool
    calls show their name only, so they are never cut)."""
    high = detail == "high"
    raw: list[object] = [TextPart(text=message.content)] if isinstance(message.content, str) else list(message.content)
    shown: list[RecallPart] = []
    for index, part in enumerate(raw):
        found = _part_text(part, high, counter)
        if found is None:
            continue
        kind, full, tool = found
        text = full
        if not high and kind != "tool-call":
            text, _ = truncate_tokens(full, _low_limit(kind), counter, part_hint(message.id, index))
        shown.append(RecallPart(message.id, index, message.role, kind, text, full, tool))
    return shown
