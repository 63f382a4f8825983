"""Per-thread sections of a resource memory's observations (spec §6.10, §7.4).

A resource memory keeps one observation log for all of a user's threads; each observation cycle
writes, per thread, a section::

    <thread id="3f2a9c1e">
    Date: Mar 3, 2025
    * 🔴 (09:00) User said ...
    </thread>

The id is the thread's id, or its xxhash32 (8 hex characters, seed 0) with `obscureThreadIds`,
so no raw thread id reaches a model through the log either.  A new section whose first `Date:`
line is already in the thread's latest section continues that section (its lines go before the
`</thread>`); otherwise it is appended after a message boundary, as any thread-scope chunk is.

With retrieval on, the new observations arrive as one observation group (spec §12), which goes
inside the section, as the original writes it.  Continuing a section by date then moves the group
whole: its `Date:` line is dropped (the section has it) and the rest stays inside the group's
tags.  The original cuts the new text at its `Date:` line, tags and all, so its merged sections
lose the new group's opening tag; keeping the group whole keeps the range the agent may recall.
"""

from __future__ import annotations

import re

import xxhash

from .observations import append_observations

__all__ = ["merge_section", "section_bodies", "shown_thread_id", "split_sections", "wrap_section"]

_SECTION = re.compile(r'<thread id="([^"]*)">\n(.*?)\n?</thread>', re.DOTALL)
_DATE = re.compile(r"^Date: .+$", re.MULTILINE)
# One whole group: its opening line, its content (what the thread's section continues with).
_ONE_GROUP = re.compile(r"\A(<observation-group[ \t][^>\n]*>)\n(.*)\n</observation-group>\Z", re.DOTALL)


def shown_thread_id(thread_id: str, obscure: bool) -> str:
    """The id a prompt shows for `thread_id`: xxhash32 as xxhash-wasm's `h32ToString` writes it
    (8 lower-case hex digits), when thread ids are obscured."""
    return xxhash.xxh32_hexdigest(thread_id.encode(), seed=0) if obscure else thread_id


def wrap_section(shown_id: str, text: str) -> str:
    return f'<thread id="{shown_id}">\n{text}\n</thread>'


def split_sections(text: str) -> list[tuple[str | None, str]]:
    """`text` cut into its `<thread id>` sections, as (id, body), and the runs of text around
    them, as (None, run), in order (a run may be empty)."""
    pieces: list[tuple[str | None, str]] = []
    at = 0
    for match in _SECTION.finditer(text):
        pieces += [(None, text[at:match.start()]), (match.group(1), match.group(2))]
        at = match.end()
    return [*pieces, (None, text[at:])]


def section_bodies(text: str) -> list[tuple[str, str]]:
    """Every `<thread id>` section of `text` as (id, body), in order."""
    return [(m.group(1), m.group(2)) for m in _SECTION.finditer(text)]


def merge_section(existing: str, shown_id: str, text: str, boundary_iso: str) -> str:
    """`existing` with the thread's new observations `text` (or their one group) merged in by
    date (spec §6.10)."""
    whole = _ONE_GROUP.match(text.strip())
    if whole is not None and "observation-group" in whole.group(2):
        whole = None  # more than one group: merged as plain text
    opening, body = (whole.group(1), whole.group(2)) if whole else (None, text)
    first_date = _DATE.search(body)
    latest = None
    for match in _SECTION.finditer(existing):
        if match.group(1) == shown_id:
            latest = match
    if first_date is not None and latest is not None:
        date = first_date.group(0)
        if date in latest.group(2).split("\n"):
            rest = body[first_date.end():].strip("\n")
            if not rest.strip():
                return existing
            if opening is not None:
                rest = f"{opening}\n{rest}\n</observation-group>"
            at = latest.end(2)
            return existing[:at] + "\n" + rest + existing[at:]
    return append_observations(existing, wrap_section(shown_id, text), boundary_iso)

