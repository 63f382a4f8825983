"""Observation groups (spec §12) read back from an observation text, and their index entries.

A group is `<observation-group id="<16 hex>" range="<first>:<last>"[ kind="reflection"]>`, its
text, and `</observation-group>`, each tag at the start of a line; a group whose close tag is
missing is ignored (the original hides its opening tag and keeps nothing of it).  Entries are
the group's text cut into chunks, each with the deterministic id §12 gives, so upserting the
same group again (a replay, a re-sent event) replaces rather than adds.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

__all__ = ["CHUNK_CHARS", "ObservationGroup", "chunks", "entry_id", "parse_groups"]

_OPEN = re.compile(r'^<observation-group((?:\s+[\w-]+="[^"]*")*)\s*>[ \t]*$', re.MULTILINE)
_ATTRIBUTE = re.compile(r'([\w-]+)="([^"]*)"')
_CLOSE = re.compile(r"^</observation-group>[ \t]*$", re.MULTILINE)
#: A chunk's size: long groups (a reflection's) are embedded in parts of about 500 tokens, so a
#: fact in one part is not averaged away by the rest.
CHUNK_CHARS = 400


@dataclass(frozen=True)
class ObservationGroup:
    id: str
    range: str
    text: str
    kind: str = "observation"


def parse_groups(observations: str) -> list[ObservationGroup]:
    """Every complete group of an observation text, in order."""
    groups: list[ObservationGroup] = []
    position = 0
    while (opening := _OPEN.search(observations, position)) is not None:
        closing = _CLOSE.search(observations, opening.end())
        following = _OPEN.search(observations, opening.end())
        if closing is None:
            break
        if following is not None and following.start() < closing.start():
            position = following.start()  # unclosed: the next group starts before any close
            continue
        attributes = dict(_ATTRIBUTE.findall(opening.group(1)))
        if "id" in attributes:
            text = observations[opening.end():closing.start()].strip("\n")
            groups.append(ObservationGroup(attributes["id"], attributes.get("range", ""), text,
                                           attributes.get("kind", "observation")))
        position = closing.end()
    return groups


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """The group's observations, one chunk each: a line that starts at the margin opens a chunk,
    its indented lines (sub-observations, `->` details) join it.  Embedded apart, one fact is not
    averaged away by the other lines of its group (measured: docs/recall.md, "Semantic search"); the
    group keeps its best chunk's score.  A chunk over `size` characters is cut at line ends."""
    items: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if items and line[:1].isspace():
            items[-1].append(line)
        else:
            items.append([line])
    parts: list[str] = []
    for item in items:
        current = ""
        for line in item:
            if current and len(current) + 1 + len(line) > size:
                parts.append(current)
                current = line
            else:
                current = f"{current}\n{line}" if current else line
        parts.append(current)
    return parts or [text]


def entry_id(resource_id: str | None, thread_id: str, group_id: str, chunk_index: int) -> str:
    """The UUID-formatted sha256 of `JSON.stringify([resourceId, threadId, groupId, chunkIndex])`,
    version nibble 8 (spec §12): the same chunk of the same group always has the same id."""
    digest = hashlib.sha256(json.dumps([resource_id, thread_id, group_id, chunk_index],
                                       separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-8{digest[13:16]}-{digest[16:20]}-{digest[20:32]}"
