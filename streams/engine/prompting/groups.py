"""Observation groups (spec §12): with `retrieval` on, each cycle's new observations are wrapped

    <observation-group id="<16 hex>" range="<firstMsgId>:<lastMsgId>">
    <text>
    </observation-group>

(a reflection's with ` kind="reflection"`), so the agent can follow a range back to the raw
messages with the `recall` tool.  The original draws the id at random; a fold may not, so it is
a digest of the memory key and the cycle that wrote the group: a refold writes the same ids.

Tags are line-started.  A group whose closing tag is missing is not a group: its opening tag is
hidden wherever the text is shown, and so is a closing tag without its opening.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..rules.temporal import is_temporal_marker
from ..state import PendingMessage

__all__ = ["ObservationGroup", "combine_ranges", "group_id", "grouped", "group_safe_line_count", "message_range",
           "parse_groups", "render_groups", "split_range", "strip_groups", "thread_cycle", "wrap_group"]

# The content may not open another group: an opening without its close is not a group.
_GROUP = re.compile(r"^<observation-group(?P<attrs>[ \t][^>\n]*)>\n"
                    r"(?P<content>(?:(?!^<observation-group[ \t]).)*?)\n?^</observation-group>[ \t]*$",
                    re.MULTILINE | re.DOTALL)
# What is left of a broken group once the whole ones are replaced: a lone opening or closing tag line.
_LONE_TAG = re.compile(r"^(?:<observation-group[ \t][^>\n]*>|</observation-group>)[ \t]*\n?", re.MULTILINE)
_ATTRIBUTE = re.compile(r'([\w][\w-]*)="([^"]*)"')
_BLANK_LINES = re.compile(r"\n{3,}")


@dataclass(frozen=True)
class ObservationGroup:
    id: str
    range: str
    content: str
    kind: str | None = None

    @property
    def start(self) -> str:
        return split_range(self.range.split(",")[0])[0]

    @property
    def end(self) -> str:
        return split_range(self.range.split(",")[-1])[1]


def split_range(segment: str) -> tuple[str, str]:
    """`first:last` into its two ids.  Ids may hold colons themselves (`om produce` names a line
    `<threadId>:<n>`): two ids of the same shape have as many, so the range's middle colon is
    the separator; with an even count, the first one."""
    colons = [i for i, c in enumerate(segment) if c == ":"]
    if not colons:
        return segment, segment
    at = colons[len(colons) // 2] if len(colons) % 2 else colons[0]
    return segment[:at], segment[at + 1:]


def group_id(memory_key: str, cycle_id: str) -> str:
    """16 hex characters, a function of the memory and the cycle that wrote the group."""
    return hashlib.sha256(f"observation-group/{memory_key}/{cycle_id}".encode()).hexdigest()[:16]


def thread_cycle(cycle_id: str, thread_id: str) -> str:
    """What a resource memory's group id is drawn from: one cycle observes several threads, and
    each thread's group needs an id of its own."""
    return f"{cycle_id}/thread/{thread_id}"


def message_range(messages: Sequence[PendingMessage]) -> str:
    """`first:last` of the messages a cycle observed, by time: the first and last with visible
    content (a temporal-gap marker is not a message the agent can recall), else the ends."""
    ordered = sorted(messages, key=lambda m: m.created_at)
    visible = [m for m in ordered if not is_temporal_marker(m.id) and (m.text.strip() or m.lines)]
    chosen = visible or ordered
    return f"{chosen[0].id}:{chosen[-1].id}"


def wrap_group(text: str, gid: str, range_: str, kind: str | None = None) -> str:
    kind_attr = f' kind="{kind}"' if kind else ""
    return f'<observation-group id="{gid}" range="{range_}"{kind_attr}>\n{text.strip()}\n</observation-group>'


def _attributes(raw: str) -> dict[str, str]:
    return dict(_ATTRIBUTE.findall(raw))


def parse_groups(text: str) -> list[ObservationGroup]:
    """The whole groups of `text`, in order (one without an id or range is not a group)."""
    groups = []
    for match in _GROUP.finditer(text or ""):
        attrs = _attributes(match["attrs"])
        if attrs.get("id") and attrs.get("range"):
            groups.append(ObservationGroup(attrs["id"], attrs["range"], match["content"].strip(),
                                           attrs.get("kind")))
    return groups


def _replace_groups(text: str, replace: Callable[[dict[str, str], str], str]) -> str:
    replaced = _GROUP.sub(lambda m: replace(_attributes(m["attrs"]), m["content"].strip()), text)
    return _BLANK_LINES.sub("\n\n", _LONE_TAG.sub("", replaced)).strip()


def strip_groups(text: str) -> str:
    """The text without group tags (what the observer and reflector read)."""
    if "observation-group" not in (text or ""):
        return text
    return _replace_groups(text, lambda _, content: content)


def render_groups(text: str) -> str | None:
    """The log as the actor reads it with retrieval on: each group a ``## Group `<id>` ``
    section with its range line (spec §10); None when the text has no group."""
    if not parse_groups(text):
        return None

    def section(attrs: dict[str, str], content: str) -> str:
        if not attrs.get("id") or not attrs.get("range"):
            return content
        return f"## Group `{attrs['id']}`\n_range: `{attrs['range']}`_\n\n{content}"

    return _replace_groups(text, section)


def combine_ranges(groups: Sequence[ObservationGroup]) -> str:
    """One range spanning the groups: the first one's start to the last one's end (ids are
    opaque, so the span is by position in the log, not by value)."""
    if not groups:
        return ""
    return f"{groups[0].start}:{groups[-1].end}"


def group_safe_line_count(text: str, count: int) -> int:
    """`count` moved forward past the end of a group it would cut (a buffered reflection
    rewrites the log's first `count` lines: half a group would leave its tags unmatched)."""
    lines = text.split("\n")
    inside = False
    for line in lines[:count]:
        if line.startswith("<observation-group ") or line.startswith("<observation-group\t"):
            inside = True
        elif line.startswith("</observation-group>"):
            inside = False
    if not inside:
        return count
    for i in range(count, len(lines)):
        if lines[i].startswith("</observation-group>"):
            return i + 1
    return len(lines)


def grouped(enabled: bool, memory_key: str, cycle_id: str, messages: Sequence[PendingMessage],
            text: str) -> str:
    """A cycle's new observations, wrapped when retrieval is on (and there is something to wrap)."""
    if not enabled or not text.strip() or not messages:
        return text
    return wrap_group(text, group_id(memory_key, cycle_id), message_range(messages))
