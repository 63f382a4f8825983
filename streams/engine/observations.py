"""The observation text: chunks joined by message-boundary lines (spec §3.4).

    <chunk>\n\n--- message boundary (2025-03-03T09:02:00.000Z) ---\n\n<chunk>

The fold writes it and the projections read it; both go through these two functions so the
format lives in one place.
"""

from __future__ import annotations

import re

__all__ = ["append_observations", "split_chunks"]

_BOUNDARY = "\n\n--- message boundary ({}) ---\n\n"
_SPLIT = re.compile(r"\n{2,}--- message boundary \([^)]*\) ---\n{2,}")


def append_observations(existing: str, new: str, boundary_iso: str) -> str:
    """`new` after `existing`, separated by a boundary stamped with the new cursor."""
    return new if not existing else existing + _BOUNDARY.format(boundary_iso) + new


def split_chunks(text: str) -> list[str]:
    """The chunks between boundaries, each byte-identical to what was appended."""
    return [part for part in _SPLIT.split(text) if part]
