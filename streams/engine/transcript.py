"""The observer's view of raw messages (spec §7.2).

Messages become dated lines::

    Mar 3 2025:
    User (9:05 AM): text
    Assistant: text            <- same time as the line before, so no time label

The date header (short month, no comma) is written whenever the date changes; the time label is
left out when it equals the previous line's and comes back after each new header.  Dates and
times are rendered in the configured time zone (UTC unless set), never the host's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

__all__ = ["TranscriptLine", "render_transcript"]


@dataclass(frozen=True, slots=True)
class TranscriptLine:
    created_at: datetime
    title: str
    body: str


def _date_header(ts: datetime) -> str:
    return f"{ts.strftime('%b')} {ts.day} {ts.year}:"


def _clock(ts: datetime) -> str:
    hour = ts.hour % 12 or 12
    return f"{hour}:{ts.minute:02d} {'AM' if ts.hour < 12 else 'PM'}"


def render_transcript(lines: Iterable[TranscriptLine], time_zone: str = "UTC") -> str:
    zone = ZoneInfo(time_zone)
    out: list[str] = []
    last_date: str | None = None
    last_time: str | None = None
    for line in lines:
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
        out.append(f"{line.title}{label}: {line.body}" if line.title else f"({clock}): {line.body}")
    return "\n".join(out)
