"""The observation text: chunks joined by message-boundary lines (spec §3.4).

    <chunk>\n\n--- message boundary (2025-03-03T09:02:00.000Z) ---\n\n<chunk>

An activation of several buffered chunks writes one boundary, stamped with the last chunk's
cursor, and their texts separated by a blank line, so they form one chunk of the log.

The fold writes it and the projections read it; both go through these two functions so the
format lives in one place.
"""

from __future__ import annotations

import re

__all__ = ["CHUNK_SEPARATOR", "append_observations", "continue_chunk", "split_chunks", "split_keeping_boundaries"]

CHUNK_SEPARATOR = "\n\n"  # between the texts of chunks activated together
_BOUNDARY = "\n\n--- message boundary ({}) ---\n\n"
_SPLIT = re.compile(r"(\n{2,}--- message boundary \([^)]*\) ---\n{2,})")


def append_observations(existing: str, new: str, boundary_iso: str) -> str:
    """`new` after `existing`, separated by a boundary stamped with the new cursor."""
    return new if not existing else existing + _BOUNDARY.format(boundary_iso) + new


def continue_chunk(existing: str, new: str) -> str:
    """`new` in the same chunk as the end of `existing` (no boundary between them)."""
    return new if not existing else existing + CHUNK_SEPARATOR + new


def split_chunks(text: str) -> list[str]:
    """The chunks between boundaries, each byte-identical to what was appended."""
    return [part for part in _SPLIT.split(text)[::2] if part]


def split_keeping_boundaries(text: str) -> list[str]:
    """Chunk, boundary, chunk, boundary, ..., chunk: joined, `text` again."""
    return _SPLIT.split(text)
