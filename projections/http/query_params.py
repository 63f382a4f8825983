"""The query parameters several read routes share, read one way: `?wait=` and `?after=P:O`.

A value that does not parse is a 400 `bad-parameter` naming it; the context and recall routes
and the access check's wait for a thread all read them here, so none of them accepts what
another refuses.
"""

from __future__ import annotations

import math

from omstream.schemas.positions import LogPosition

from .errors import api_error

__all__ = ["MAX_WAIT", "parse_log_position", "parse_wait"]

#: The longest `?wait=` honoured, in seconds (a longer one is clamped, not refused).
MAX_WAIT = 300.0


def parse_wait(raw: str | None) -> float:
    """`?wait=SECONDS`, clamped to 0..MAX_WAIT (default 10); `bad-parameter` for what is no finite
    number (a `nan` compares false with every deadline, so it would never time out)."""
    try:
        wait = float(raw) if raw is not None else 10.0
    except ValueError:
        wait = math.nan
    if not math.isfinite(wait):
        raise api_error(400, "bad-parameter", f"wait must be a number of seconds, not {raw!r}")
    return min(max(wait, 0.0), MAX_WAIT)


def parse_log_position(raw: str | None) -> LogPosition | None:
    """`?after=PARTITION:OFFSET` of `<ns>.log`, None when absent; `bad-parameter` otherwise."""
    if raw is None:
        return None
    try:
        return LogPosition.parse(raw)
    except ValueError as exc:
        raise api_error(400, "bad-parameter", str(exc)) from None
