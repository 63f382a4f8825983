"""The observer's view of raw messages (spec §7.2).

Messages become dated lines::

    Mar 3 2025:
    User (9:05 AM): text
    Assistant: text            <- same time as the line before, so no time label
    Signal: 13 minutes later — 03/03/2025, 9:20 AM UTC   <- a temporal-gap marker (spec §14)

The date header (short month, no comma) is written whenever the date changes; the time label is
left out when it equals the previous line's and comes back after each new header.  Dates and
times are rendered in the configured time zone (UTC unless set), never the host's.  A `Signal`
line has no time of its own: a reader takes the previous line's.

A message of parts yields one line per part (`transcribe`, computed once at ingest):

    User: text                          Reasoning: text
    Tool Call search: q: "lyon"         <- an outline of the arguments, ≤ 2 000 tokens
    Tool Result search: {...}           <- what the model saw, cut to 5 000 tokens
    Tool Error shot: boom               Tool Denied rm: Tool call was not approved by the user
    Image: [Image #1: cat.png]          File: [File #1: a.pdf]

Attachments are numbered per observer call, images and files apart, so the lines hold a
placeholder mark that `AttachmentNumbers` turns into `[Image #n: label]` when the transcript of
one call is rendered.  An image-like file counts as an image (its line keeps the `File` title).
`transcribe` also returns the message's attachments (`observer_attachments.Attachment`), one per mark
that reaches the transcript and in the same order, so the observer request can send each one
under the placeholder the transcript shows for it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from omstream.schemas.messages import (
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

from ..rules.attachments import attachment_label, is_image_like_file
from ..rules.tokens import (
    EMPTY_RESULT,
    TOOL_FAILED,
    block_attachment,
    denial_reason,
    format_tool_result,
    is_tool_error,
    js_json,
    js_length,
    multimodal_blocks,
    tool_result_value,
)
from ..state import Attachment, PendingMessage
from .observer_attachments import attachment_of, placeholder_text

__all__ = [
    "SIGNAL",
    "AttachmentNumbers",
    "Transcribed",
    "TranscriptLine",
    "message_lines",
    "observer_transcript",
    "outline_arguments",
    "placeholder",
    "render_transcript",
    "transcribe",
    "truncate_to_tokens",
]

Count = Callable[[str], int]

#: The title of a temporal-gap marker's line.
SIGNAL = "Signal"

TOOL_RESULT_MAX_TOKENS = 5_000
TOOL_ARGUMENT_MAX_TOKENS = 2_000
ARGUMENTS_UNAVAILABLE = "[arguments unavailable]"


@dataclass(frozen=True, slots=True)
class TranscriptLine:
    created_at: datetime | None  # None: no time of its own (a signal), no label, no header
    title: str
    body: str


#: The month names of the transcript's date headers and of the observations' `Date:` lines, in
#: English whatever the process's locale: every reader of either expects these.
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
#: A date header as `_date_header` writes it ("Mar 9 2024:"), for the modules that read a rendered
#: transcript back (`prompts`' anchors, `answer_grammar`).
DATE_HEADER = re.compile(r"^([A-Z][a-z]{2}) (\d{1,2}) (\d{4}):$", re.MULTILINE)


def clock24(hour: str, minute: str, half: str) -> str:
    """ "HH:MM" (24-hour, as observations write times) of a time label's "h:mm AM|PM" parts."""
    return f"{int(hour) % 12 + (12 if half == 'P' else 0):02d}:{minute}"


def _date_header(ts: datetime) -> str:
    return f"{MONTHS[ts.month - 1]} {ts.day} {ts.year}:"


def _clock(ts: datetime) -> str:
    hour = ts.hour % 12 or 12
    return f"{hour}:{ts.minute:02d} {'AM' if ts.hour < 12 else 'PM'}"


def render_transcript(lines: Iterable[TranscriptLine], time_zone: str = "UTC") -> str:
    zone = ZoneInfo(time_zone)
    out: list[str] = []
    last_date: str | None = None
    last_time: str | None = None
    for line in lines:
        if line.created_at is None:
            out.append(f"{line.title}: {line.body}")
            continue
        local = line.created_at.astimezone(zone)
        header = _date_header(local)
        if header != last_date:
            if out:
                out.append("")
            out.append(header)
            last_date, last_time = header, None
        clock = _clock(local)
        label = f" ({clock})" if clock != last_time else ""
        last_time = clock
        out.append(f"{line.title}{label}: {line.body}")
    return "\n".join(out)


# --- attachments: placeholders numbered per observer call -------------------------------------
_MARK = re.compile("\ue000([IF])\ue001([^\ue002]*)\ue002")


def placeholder(kind: str, label: str | None) -> str:
    """A mark for an attachment (`kind` "image" or "file"), numbered when rendered."""
    return f"\ue000{'I' if kind == 'image' else 'F'}\ue001{label or ''}\ue002"


def _part_placeholder(part: Mapping[str, Any]) -> str:
    image = part.get("type") == "image" or is_image_like_file(part)
    return placeholder("image" if image else "file", attachment_label(part))


class AttachmentNumbers:
    """Numbers the attachment marks of one transcript: `[Image #1: a.png]`, `[File #1]`, ..."""

    def __init__(self) -> None:
        self.images = 0
        self.files = 0

    def _number(self, match: re.Match[str]) -> str:
        if match.group(1) == "I":
            self.images += 1
            kind, number = "image", self.images
        else:
            self.files += 1
            kind, number = "file", self.files
        return placeholder_text(kind, number, match.group(2))

    def fill(self, title: str, body: str) -> str:
        """The body with its marks numbered; only attachment and tool outcome lines hold marks
        (a failed tool's result may carry attachments too)."""
        if not _holds_marks(title):
            return body
        return _MARK.sub(self._number, body).translate(_STRAY_MARKS)


def _cut(body: str, max_part_length: int | None) -> str:
    """A part cut to `max_part_length` characters, as other-thread context shows it (§7.2)."""
    if max_part_length is None or len(body) <= max_part_length:
        return body
    return f"{body[:max_part_length]}\n... [truncated {len(body) - max_part_length} characters]"


def observer_transcript(messages: Iterable[PendingMessage], time_zone: str, *,
                        numbers: AttachmentNumbers | None = None,
                        max_part_length: int | None = None) -> str:
    """The transcript one observer call reads: the messages' lines, attachments numbered.
    A multi-thread call passes one `numbers` for all its threads' transcripts."""
    if numbers is None:
        numbers = AttachmentNumbers()  # [Image #n] / [File #n] count from 1 in every observer call
    # A signal line has no time of its own: the reader takes the previous line's (spec §14).
    return render_transcript(
        (TranscriptLine(None if title == SIGNAL else m.created_at, title,
                        _cut(numbers.fill(title, body), max_part_length))
         for m in messages
         for title, body in (m.lines if m.lines is not None
                             else ((m.role.capitalize() if m.title is None else m.title, m.text),))),
        time_zone)


def _holds_marks(title: str) -> bool:
    return title in ("Image", "File") or title.startswith(("Tool Result ", "Tool Error "))


_STRAY_MARKS = {0xE000: None, 0xE001: None, 0xE002: None}  # a mark cut by truncation


# --- truncation -------------------------------------------------------------------------------
def truncate_to_tokens(text: str, max_tokens: int, count: Count) -> str:
    """`text` if it fits `max_tokens`, else its longest prefix that fits together with
    `\\n... [truncated ~N tokens]` (N = the tokens left out)."""
    if not text or max_tokens <= 0:
        return ""
    total = count(text)
    if total <= max_tokens:
        return text

    def candidate(end: int) -> str:
        visible = text[:end]
        return f"{visible}\n... [truncated ~{total - count(visible)} tokens]"

    return _longest_within(candidate, len(text), max_tokens, count) or candidate(0)


def _longest_within(render: Callable[[int], str], length: int, budget: int, count: Count) -> str:
    """`render(end)` for the largest prefix end whose rendering fits `budget` tokens ("" if none).

    A binary search: renderings grow with `end`.  No estimator gives more than 24 characters a
    token, so ends beyond `budget * 24` are never tried.
    """
    low, high, best = 0, min(length, max(0, budget) * 24), ""
    while low <= high:
        mid = (low + high) // 2
        attempt = render(mid)
        if count(attempt) <= budget:
            best, low = attempt, mid + 1
        else:
            high = mid - 1
    return best


# --- tool arguments ---------------------------------------------------------------------------
_INLINE_STRING = 160
_MAX_DEPTH = 5
_MAX_ENTRIES = 20
_MAX_OUTLINE = 100
_MAX_PATH = 160
_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
_SIZE_MARKER = "... [additional argument fields omitted by size limit]"
_STRUCTURE_MARKER = "... [additional nested entries omitted by structure limit]"
_PREVIEW_HEADER = "Large string previews (size-limited):"


def _primitive(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return js_json(value)


def _digest(text: str) -> str:
    """FNV-1a over UTF-16 code units: tells long paths apart that differ in the middle."""
    digest = 0x811C9DC5
    data = text.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        digest = ((digest ^ (data[i] | data[i + 1] << 8)) * 0x01000193) & 0xFFFFFFFF
    return f"{digest:08x}"


def _path(parent: str, key: Any, in_array: bool) -> str:
    if in_array:
        path = f"{parent}[{key}]"
    else:
        segment = key if _IDENTIFIER.match(key) else f"[{json.dumps(key, ensure_ascii=False)}]"
        path = f"{parent}.{segment}" if parent else segment
    if len(path) <= _MAX_PATH:
        return path
    return f"{path[:50]}…[{len(path) - 110} chars; {_digest(path)}]…{path[-60:]}"


def _summary(value: Mapping[Any, Any] | list[Any]) -> str:
    if isinstance(value, Mapping):
        return "<object>"
    return f"<array, {len(value)} {'item' if len(value) == 1 else 'items'}>"


def _long_string(length: int) -> str:
    return f"<string, {length} characters; preview size-limited>"


def _preview(path: str, value: str, budget: int, count: Count) -> str:
    """`path:` and the longest `  | `-indented head of `value` within `budget` tokens."""
    def render(end: int) -> str:
        body = "\n".join(f"  | {line}" for line in value[:end].split("\n"))
        omitted = len(value) - end
        return f"{path}:\n{body}" + (f"\n  | ... [{omitted} characters omitted]" if omitted else "")

    return _longest_within(render, len(value), budget, count)


def _select(entries: list[tuple[str, float]], max_tokens: int, count: Count) -> str:
    """The outline lines within `max_tokens`: all of them, else the shallowest and smallest first
    (kept in their order) and the size marker."""
    text = "\n".join(line for line, _ in entries)
    if count(text) <= max_tokens:
        return text
    ranked = sorted(range(len(entries)), key=lambda i: (entries[i][1], count(entries[i][0]), len(entries[i][0]), i))
    chosen: list[int] = []
    for index in ranked:
        attempt = "\n".join([*(entries[i][0] for i in sorted([*chosen, index])), _SIZE_MARKER])
        if count(attempt) <= max_tokens:
            chosen.append(index)
    return "\n".join([*(entries[i][0] for i in sorted(chosen)), _SIZE_MARKER])


def _append(base: str, addition: str, max_tokens: int, count: Count) -> str | None:
    text = f"{base}\n{addition}" if base else addition
    return text if count(text) <= max_tokens else None


def outline_arguments(value: Any, count: Count, max_tokens: int = TOOL_ARGUMENT_MAX_TOKENS) -> str:
    """Tool arguments as breadth-first `path: value` lines (spec §7.2).

    Depth ≤ 5, ≤ 20 entries per container, ≤ 100 lines; a string over 160 characters is shown
    as `<string, N characters; preview size-limited>` and previewed after the outline under
    `Large string previews (size-limited):`, the previews sharing what is left of `max_tokens`.
    """
    if not isinstance(value, Mapping | list):
        if not isinstance(value, str) or js_length(value) <= _INLINE_STRING:
            return _primitive(value)
        summary = _long_string(js_length(value))
        preview = _preview("preview", value, max_tokens - count(summary), count)
        return (preview and _append(summary, preview, max_tokens, count)) or summary

    entries: list[tuple[str, float]] = []  # (line, depth)
    previews: list[tuple[str, str]] = []
    queue: list[tuple[str, Mapping[Any, Any] | list[Any], int]] = [("", value, 0)]
    lines = 0
    cut = False
    while queue and lines < _MAX_OUTLINE:
        path, container, depth = queue.pop(0)
        in_array = isinstance(container, list)
        items = list(enumerate(container)) if isinstance(container, list) else list(container.items())
        shown, more = items[:_MAX_ENTRIES], len(items) > _MAX_ENTRIES
        if not items:
            entries.append((f"{path or 'arguments'}: [empty {'array' if in_array else 'object'}]", depth))
            lines += 1
            continue
        if more:
            entries.append((f"{path or ('items' if in_array else 'fields')}: ... [additional entries omitted]", depth))
            lines += 1
        for key, entry in shown:
            if lines >= _MAX_OUTLINE:
                cut = True
                break
            lines += 1
            child = _path(path, str(key) if not in_array else key, in_array)
            if isinstance(entry, str) and js_length(entry) > _INLINE_STRING:
                entries.append((f"{child}: {_long_string(js_length(entry))}", depth))
                previews.append((child, entry))
            elif not isinstance(entry, Mapping | list):
                entries.append((f"{child}: {_primitive(entry)}", depth))
            elif depth >= _MAX_DEPTH:
                entries.append((f"{child}: {_summary(entry)} [max depth reached]", depth))
            else:
                entries.append((f"{child}: {_summary(entry)}", depth))
                queue.append((child, entry, depth + 1))
    if queue or cut:
        entries.append((_STRUCTURE_MARKER, float("inf")))

    outline = _select(entries, max_tokens, count)
    if not previews:
        return outline
    rendered = _append(outline, _PREVIEW_HEADER, max_tokens, count)
    if rendered is None:
        return outline
    shown_previews = omitted = 0
    for index, (path, text) in enumerate(previews):
        budget = (max_tokens - count(rendered)) // (len(previews) - index)
        preview = _preview(path, text, budget, count)
        extended = _append(rendered, preview, max_tokens, count) if preview else None
        if extended is None:
            omitted += 1
            continue
        rendered, shown_previews = extended, shown_previews + 1
    if not shown_previews:
        return outline
    if omitted:
        marker = f"... [{omitted} large string {'preview' if omitted == 1 else 'previews'} omitted]"
        rendered = _append(rendered, marker, max_tokens, count) or rendered
    return rendered


def _arguments_body(args: Any, count: Count) -> str:
    if args is None or args == "":
        return ARGUMENTS_UNAVAILABLE
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            parsed = None
        if isinstance(parsed, Mapping | list):
            args = parsed  # streamed JSON arguments: outline the object
    return outline_arguments(args, count) or ARGUMENTS_UNAVAILABLE


# --- tool results -----------------------------------------------------------------------------
Lifted = tuple[Mapping[str, Any], ...]  # the attachment parts lifted out of a result, in order


def _lift_attachments(blocks: list[Any]) -> tuple[list[Any], Lifted]:
    """Attachment blocks replaced by `{type, placeholder}`, and the attachments, in order."""
    lifted, attachments = [], []
    for block in blocks:
        attachment = block_attachment(block)
        if attachment is None:
            lifted.append(block)
        else:
            lifted.append({"type": block.get("type"), "placeholder": _part_placeholder(attachment)})
            attachments.append(attachment)
    return lifted, tuple(attachments)


def _result_body(part: ToolResultPart, count: Count) -> tuple[str, Lifted]:
    value, typed_blocks = tool_result_value(part)
    attachments: Lifted = ()
    if typed_blocks:
        value, attachments = _lift_attachments(value)
    else:
        blocks = multimodal_blocks(value)
        if blocks is not None and isinstance(value, Mapping) and value.get("type") == "content":
            lifted, attachments = _lift_attachments(blocks)
            value = {**value, "value": lifted}
    if value is None or value == "" or value == []:
        return EMPTY_RESULT, ()
    body = truncate_to_tokens(format_tool_result(value), TOOL_RESULT_MAX_TOKENS, count) or EMPTY_RESULT
    # The JSON keeps the blocks' order and truncation keeps a prefix: the placeholders left
    # whole are those of the first attachments (a cut one is dropped when numbered).
    return body, attachments[:len(_MARK.findall(body))]


def _outcome_line(part: ToolResultPart, count: Count) -> tuple[str, str, Lifted]:
    if part.denied:
        return f"Tool Denied {part.tool_name}", denial_reason(part), ()
    if is_tool_error(part):
        if part.error:
            return (f"Tool Error {part.tool_name}",
                    truncate_to_tokens(part.error, TOOL_RESULT_MAX_TOKENS, count), ())
        body, attachments = _result_body(part, count)
        if body == EMPTY_RESULT:
            return f"Tool Error {part.tool_name}", TOOL_FAILED, ()
        return f"Tool Error {part.tool_name}", body, attachments
    return (f"Tool Result {part.tool_name}", *_result_body(part, count))


# --- messages ---------------------------------------------------------------------------------
class Transcribed(NamedTuple):
    """A message as the observer reads it: its lines (None for string content: one line with
    the role as title and the content as body) and its attachments, in placeholder order."""

    lines: tuple[tuple[str, str], ...] | None
    attachments: tuple[Attachment, ...]


def transcribe(message: Message, count: Count) -> Transcribed:
    """The (title, body) lines of a message of parts, and its attachments: one per placeholder
    the lines hold, top-level parts and those lifted out of tool results alike.  Parts with
    nothing to show yield no line."""
    if isinstance(message.content, str):
        return Transcribed(None, ())
    role = message.role.capitalize()
    lines: list[tuple[str, str]] = []
    attachments: list[Attachment] = []
    for part in message.content:
        found: Lifted = ()
        if isinstance(part, TextPart):
            line = (role, part.text)
        elif isinstance(part, ReasoningPart):
            line = ("Reasoning", part.text)
        elif isinstance(part, ToolCallPart):
            line = (f"Tool Call {part.tool_name}", _arguments_body(part.args, count))
        elif isinstance(part, ToolResultPart):
            title, body, found = _outcome_line(part, count)
            line = (title, body)
        elif isinstance(part, ImagePart | FilePart):
            title = "Image" if isinstance(part, ImagePart) else "File"
            wire = part.model_dump(by_alias=True, exclude_none=True)
            line, found = (title, _part_placeholder(wire)), (wire,)
        else:  # data-* parts are application data, not conversation
            continue
        if line[1]:
            lines.append(line)
            attachments += (attachment_of(p) for p in found)
    return Transcribed(tuple(lines), tuple(attachments))


def message_lines(message: Message, count: Count) -> tuple[tuple[str, str], ...] | None:
    """The (title, body) lines of a message of parts (`transcribe` without the attachments)."""
    return transcribe(message, count).lines
