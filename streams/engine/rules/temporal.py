"""Temporal gap markers: telling the model how much time passed (spec §14).

When a user comes back after a pause of at least ten minutes, a `system-reminder` is inserted
before their message, e.g. `2 hours 15 minutes later — 01/15/2026, 2:30 PM PST`.  The gap is
measured between the last part of the previous message and the first part of the new one, in
event time; the wording uses two units at most (`1 week 2 days later`), months of 30 days and
years of 365.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

__all__ = [
    "MIN_TEMPORAL_GAP_MS",
    "TEMPORAL_GAP_REMINDER_TYPE",
    "TemporalGap",
    "TimedMessage",
    "format_temporal_gap",
    "format_temporal_timestamp",
    "is_temporal_marker",
    "plan_temporal_gap",
    "temporal_marker_id",
]

TEMPORAL_GAP_REMINDER_TYPE = "temporal-gap"
MIN_TEMPORAL_GAP_MS = 10 * 60 * 1000

_MINUTE = 60 * 1000
_HOUR = 60 * _MINUTE
_DAY = 24 * _HOUR
_WEEK = 7 * _DAY
_MONTH = 30 * _DAY
_YEAR = 365 * _DAY

# (upper bound of the range, primary unit, secondary unit): each range is worded in its
# primary unit plus the remainder in the next smaller one.
_RANGES = (
    (_DAY, (_HOUR, "hour"), (_MINUTE, "minute")),
    (_WEEK, (_DAY, "day"), (_HOUR, "hour")),
    (_MONTH, (_WEEK, "week"), (_DAY, "day")),
    (_YEAR, (_MONTH, "month"), (_WEEK, "week")),
    (None, (_YEAR, "year"), (_MONTH, "month")),
)


def _unit(value: int, name: str) -> str:
    return f"{value} {name}{'' if value == 1 else 's'}"


def format_temporal_gap(gap_ms: int | float) -> str | None:
    """The gap as words, or None under ten minutes."""
    if gap_ms < MIN_TEMPORAL_GAP_MS:
        return None
    if gap_ms < _HOUR:
        # JavaScript Math.round: halves round up
        return f"{_unit(max(1, int(gap_ms / _MINUTE + 0.5)), 'minute')} later"
    for upper, (primary_ms, primary), (secondary_ms, secondary) in _RANGES:
        if upper is None or gap_ms < upper:
            major = int(gap_ms // primary_ms)
            minor = int((gap_ms - major * primary_ms) // secondary_ms)
            words = _unit(major, primary) + (f" {_unit(minor, secondary)}" if minor else "")
            return f"{words} later"
    raise AssertionError("unreachable: the last range is unbounded")


# Zones whose short names en-US spells as abbreviations; everywhere else it writes "GMT+h[:mm]".
_US_ABBREVIATIONS = frozenset(
    {"EST", "EDT", "CST", "CDT", "MST", "MDT", "PST", "PDT", "AKST", "AKDT", "HST", "HDT"}
)
_US_ZONE_PREFIXES = (
    "America/", "US/", "Pacific/Honolulu", "EST", "MST", "HST", "PST8PDT", "CST6CDT", "EST5EDT", "MST7MDT",
)
_UTC_ZONES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Zulu", "Etc/Zulu"})


def _zone_label(local: datetime, zone: tzinfo) -> str:
    key = getattr(zone, "key", None) or ("UTC" if zone is UTC else None)
    if key in _UTC_ZONES:
        return "UTC"
    name = local.tzname() or ""
    if name in _US_ABBREVIATIONS and key is not None and key.startswith(_US_ZONE_PREFIXES):
        return name
    offset = local.utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds() // 60)
    if minutes == 0:
        return "GMT"
    sign = "+" if minutes > 0 else "-"
    hours, rest = divmod(abs(minutes), 60)
    return f"GMT{sign}{hours}" + (f":{rest:02d}" if rest else "")


def format_temporal_timestamp(at: datetime | int, zone: tzinfo = UTC) -> str:
    """`toLocaleString('en-US', {2-digit month/day, numeric year and hour, 12 h, short zone})`,
    e.g. `01/15/2026, 2:30 PM PST`.

    Node's ICU writes a narrow no-break space before AM/PM; the spec's example, followed here,
    has a plain space.
    """
    instant = _to_datetime(at)
    local = instant.astimezone(zone)
    hour = local.hour % 12 or 12
    meridiem = "AM" if local.hour < 12 else "PM"
    return (
        f"{local.month:02d}/{local.day:02d}/{local.year}, {hour}:{local.minute:02d} {meridiem} "
        f"{_zone_label(local, zone)}"
    )


def _to_datetime(at: datetime | int) -> datetime:
    if isinstance(at, datetime):
        return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=at)


# --- the marker's id ---------------------------------------------------------------------------
#: Every marker id starts so (`__temporal_gap_<messageId>`, the original's prefix test).
MARKER_ID_PREFIX = "__temporal_"


def temporal_marker_id(precedes_message_id: str) -> str:
    """The marker's id, derived from the message it precedes.

    The original draws a uuid; a fold may not, and one marker per message is exactly the
    de-duplication §14 asks for, so the id is a function of that message.
    """
    return f"{MARKER_ID_PREFIX}gap_{precedes_message_id}"


def is_temporal_marker(message_id: str) -> bool:
    """Whether a message id is a marker's (`temporal_marker_id`)."""
    return message_id.startswith(MARKER_ID_PREFIX)


@dataclass(frozen=True, slots=True)
class TimedMessage:
    """A message as the marker rule sees it: its id and its first/last part times (unix ms;
    both are the message's createdAt when its parts carry no times)."""

    message_id: str
    first_part_ms: int
    last_part_ms: int
    precedes_message_id: str | None = None  # set on a marker: the message it was inserted for


@dataclass(frozen=True, slots=True)
class TemporalGap:
    """A marker to insert before `precedes_message_id`."""

    marker_id: str
    precedes_message_id: str
    gap_ms: int
    gap_text: str
    timestamp_ms: int
    timestamp: str

    @property
    def contents(self) -> str:
        """The reminder's text, `<gapText> — <timestamp>`."""
        return f"{self.gap_text} — {self.timestamp}"

    @property
    def created_at_ms(self) -> int:
        """One millisecond before the message, so the marker sorts just ahead of it."""
        return self.timestamp_ms - 1

    @property
    def attributes(self) -> dict[str, Any]:
        return {
            "type": TEMPORAL_GAP_REMINDER_TYPE,
            "gapText": self.gap_text,
            "gapMs": self.gap_ms,
            "timestamp": self.timestamp,
            "timestampMs": self.timestamp_ms,
            "precedesMessageId": self.precedes_message_id,
        }

    @property
    def metadata(self) -> dict[str, Any]:
        shared = {k: v for k, v in self.attributes.items() if k != "type"}
        return {
            "reminderType": TEMPORAL_GAP_REMINDER_TYPE,
            **shared,
            "systemReminder": {"type": TEMPORAL_GAP_REMINDER_TYPE, "message": self.contents, **shared},
        }


def plan_temporal_gap(
    messages: Sequence[TimedMessage], latest_input_id: str, zone: tzinfo = UTC
) -> TemporalGap | None:
    """The marker to insert before the turn's latest input message, if any (spec §14).

    `messages` is the observable list in order, markers included.  Nothing is inserted when the
    input is itself a marker, has no earlier message, already has a marker, or follows the
    previous message by less than ten minutes.
    """
    if is_temporal_marker(latest_input_id):
        return None
    index = next((i for i, m in enumerate(messages) if m.message_id == latest_input_id), -1)
    if index <= 0:
        return None
    own_marker = temporal_marker_id(latest_input_id)
    if any(
        m.message_id == own_marker or m.precedes_message_id == latest_input_id
        for m in messages
        if is_temporal_marker(m.message_id)
    ):
        return None
    previous = next((m for m in reversed(messages[:index]) if not is_temporal_marker(m.message_id)), None)
    if previous is None:
        return None
    latest = messages[index]
    gap_ms = latest.first_part_ms - previous.last_part_ms
    gap_text = format_temporal_gap(gap_ms)
    if gap_text is None:
        return None
    return TemporalGap(
        marker_id=temporal_marker_id(latest_input_id),
        precedes_message_id=latest_input_id,
        gap_ms=gap_ms,
        gap_text=gap_text,
        timestamp_ms=latest.first_part_ms,
        timestamp=format_temporal_timestamp(latest.first_part_ms, zone),
    )
