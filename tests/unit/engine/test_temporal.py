"""Temporal gap markers (spec §14)."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from omstream.engine.fold import fold, new_state
from omstream.engine.rules.temporal import (
    TimedMessage,
    format_temporal_gap,
    format_temporal_timestamp,
    is_temporal_marker,
    plan_temporal_gap,
    temporal_marker_id,
)
from omstream.models.scripted import observe
from omstream.schemas.control import ObserveRequested
from tests.helpers import T0, engine, message

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR


# --- formatTemporalGap ------------------------------------------------------------------------
def test_spec_examples():
    assert format_temporal_gap(2 * HOUR + 15 * MIN) == "2 hours 15 minutes later"
    assert format_temporal_gap(3 * DAY) == "3 days later"
    assert format_temporal_gap(9 * DAY) == "1 week 2 days later"


def test_under_ten_minutes_is_no_gap():
    assert format_temporal_gap(10 * MIN - 1) is None
    assert format_temporal_gap(0) is None
    assert format_temporal_gap(-5 * HOUR) is None


@pytest.mark.parametrize(("gap", "text"), [
    (10 * MIN, "10 minutes later"),
    (15 * MIN, "15 minutes later"),
    (30 * MIN, "30 minutes later"),
    (45 * MIN, "45 minutes later"),
    (59 * MIN + 30_000, "60 minutes later"),  # minutes are rounded below an hour
    (HOUR, "1 hour later"),
    (HOUR + 26 * MIN, "1 hour 26 minutes later"),
    (6 * HOUR + 44 * MIN + 59_999, "6 hours 44 minutes later"),  # floored above an hour
    (DAY, "1 day later"),
    (DAY + 13 * HOUR, "1 day 13 hours later"),
    (7 * DAY, "1 week later"),
    (10 * DAY, "1 week 3 days later"),
    (30 * DAY, "1 month later"),
    (44 * DAY, "1 month 2 weeks later"),
    (365 * DAY, "1 year later"),
    (425 * DAY, "1 year 2 months later"),
    (2 * 365 * DAY, "2 years later"),
    (40_433_500, "11 hours 13 minutes later"),
])
def test_two_unit_wording(gap, text):
    assert format_temporal_gap(gap) == text


# --- timestamps ---------------------------------------------------------------------------------
def test_timestamp_format_of_the_spec():
    at = datetime(2026, 1, 15, 22, 30, tzinfo=UTC)
    assert format_temporal_timestamp(at, ZoneInfo("America/Los_Angeles")) == "01/15/2026, 2:30 PM PST"


@pytest.mark.parametrize(("at", "zone", "text"), [
    (datetime(2025, 1, 1, 8, 50, tzinfo=UTC), UTC, "01/01/2025, 8:50 AM UTC"),
    (datetime(2025, 1, 1, 0, 5, tzinfo=UTC), ZoneInfo("UTC"), "01/01/2025, 12:05 AM UTC"),
    (datetime(2025, 7, 4, 12, 0, tzinfo=UTC), ZoneInfo("America/New_York"), "07/04/2025, 8:00 AM EDT"),
    (datetime(2025, 1, 1, 12, 0, tzinfo=UTC), ZoneInfo("Europe/Berlin"), "01/01/2025, 1:00 PM GMT+1"),
    (datetime(2025, 1, 1, 12, 0, tzinfo=UTC), ZoneInfo("Asia/Kolkata"), "01/01/2025, 5:30 PM GMT+5:30"),
    (datetime(2025, 1, 1, 12, 0, tzinfo=UTC), ZoneInfo("Asia/Shanghai"), "01/01/2025, 8:00 PM GMT+8"),
    (datetime(2025, 1, 1, 12, 0, tzinfo=UTC), ZoneInfo("Europe/London"), "01/01/2025, 12:00 PM GMT"),
])
def test_timestamp_zones(at, zone, text):
    assert format_temporal_timestamp(at, zone) == text


def test_timestamp_from_unix_ms():
    assert format_temporal_timestamp(1_735_721_400_000) == "01/01/2025, 8:50 AM UTC"


# --- marker planning ------------------------------------------------------------------------------
T = 1_735_718_400_000  # 2025-01-01T08:00:00Z


def msg(mid, first, last=None, precedes=None):
    return TimedMessage(mid, first, first if last is None else last, precedes)


def test_marker_before_a_late_input():
    gap = plan_temporal_gap([msg("h1", T), msg("h2", T + 20 * MIN), msg("in", T + 50 * MIN)], "in")
    assert gap is not None
    assert (gap.gap_ms, gap.gap_text, gap.precedes_message_id) == (30 * MIN, "30 minutes later", "in")
    assert gap.timestamp == "01/01/2025, 8:50 AM UTC"
    assert gap.contents == "30 minutes later — 01/01/2025, 8:50 AM UTC"
    assert gap.created_at_ms == T + 50 * MIN - 1
    assert is_temporal_marker(gap.marker_id) and gap.marker_id == temporal_marker_id("in")
    assert gap.attributes == {
        "type": "temporal-gap", "gapText": "30 minutes later", "gapMs": 30 * MIN,
        "timestamp": gap.timestamp, "timestampMs": T + 50 * MIN, "precedesMessageId": "in",
    }
    assert gap.metadata["reminderType"] == "temporal-gap"
    assert gap.metadata["systemReminder"]["message"] == gap.contents
    assert gap.metadata["systemReminder"]["precedesMessageId"] == "in"


def test_gap_runs_from_last_part_to_first_part():
    messages = [msg("prev", T, last=T + 25 * MIN), msg("in", T + 34 * MIN, last=T + 90 * MIN)]
    assert plan_temporal_gap(messages, "in") is None  # 9 minutes between the parts
    messages = [msg("prev", T, last=T + 20 * MIN), msg("in", T + 34 * MIN)]
    assert plan_temporal_gap(messages, "in").gap_text == "14 minutes later"


def test_existing_markers_are_skipped_and_never_duplicated():
    marker = msg(temporal_marker_id("in"), T + 60 * MIN - 1, precedes="in")
    assert plan_temporal_gap([msg("h1", T), marker, msg("in", T + 60 * MIN)], "in") is None
    # a marker for an earlier message is looked past when finding the previous message
    old = msg("__temporal_gap_x", T + 59 * MIN, precedes="h9")
    gap = plan_temporal_gap([msg("h1", T), old, msg("in", T + 60 * MIN)], "in")
    assert gap.gap_text == "1 hour later"


def test_no_marker_without_history_or_for_a_marker():
    assert plan_temporal_gap([msg("in", T)], "in") is None
    assert plan_temporal_gap([msg("h1", T)], "missing") is None
    assert plan_temporal_gap([msg("h1", T), msg("__temporal_gap_z", T + DAY)], "__temporal_gap_z") is None
    assert plan_temporal_gap([msg("__temporal_gap_q", T), msg("in", T + DAY)], "in") is None


# --- what the observer sees (§14, corrected from the 1.31.0 recordings) ------------------------
def test_a_13_minute_gap_reads_as_a_signal_line_after_its_message_and_the_scripted_observer_reports_it():
    """Acceptance: the observer transcript and the scripted observer's output for a 13-minute
    gap read as in §14."""
    config = engine(5000, temporalMarkers=True)
    reply = message(1, words=8).model_copy(update={"created_at": T0 + timedelta(minutes=7)})
    user = message(2, words=12).model_copy(update={"created_at": T0 + timedelta(minutes=20)})
    state, jobs = new_state("thread:t1", "t1", "u1"), []
    for item in (message(0, words=12), reply, user, ObserveRequested(thread_id="t1", at=user.created_at)):
        out = fold(state, item, config)
        state, jobs = out.state, jobs + list(out.jobs)
    assert state.in_flight.message_ids[-2:] == ("t1-m2", "__temporal_gap_t1-m2")  # after its message
    # Counted as the original stores it: a `signal` message of one text part, the contents
    # (tokenx: 1 + 16 + 3.8 -> 21), not the `<system-reminder>` string alone (28).
    [marker] = [m for m in state.pending if m.id == "__temporal_gap_t1-m2"]
    assert marker.text == "13 minutes later — 03/03/2025, 9:20 AM UTC"
    counter = config.counter
    assert (counter.count("signal"), counter.count(marker.text), marker.tokens) == (1, 16, 21)
    assert counter.count(f"<system-reminder>{marker.text}</system-reminder>") == 28
    request = jobs[0].messages[1].content
    history = request.split("## New Message History to Observe")[1]
    assert "\nAssistant (9:07 AM): [1] " in history
    assert f"\nUser (9:20 AM): {user.text()}\nSignal: 13 minutes later — 03/03/2025, 9:20 AM UTC" in history
    answer = observe(jobs[0].messages[0].content, request).split("\n")
    at = answer.index("* 🟢 (09:20) Signal: 13 minutes later — 03/03/2025, 9:20 AM UTC")
    assert answer[at - 1].startswith("* 🔴 (09:20) User said: [2] ")


def test_the_scripted_observer_reads_signal_lines_and_title_less_marker_lines():
    history = ("## New Message History to Observe\n\nMar 3 2025:\nUser (9:20 AM): back again\n"
               "Signal: 13 minutes later — 03/03/2025, 9:20 AM UTC\nAssistant (9:21 AM): hello\n"
               "(9:40 AM): 19 minutes later\nTool Call search: q: \"x\"")
    lines = observe("system", history).split("\n")
    assert lines[1:6] == [
        "Date: Mar 3, 2025",
        "* 🔴 (09:20) User said: back again",
        "* 🟢 (09:20) Signal: 13 minutes later — 03/03/2025, 9:20 AM UTC",
        "* 🟡 (09:21) Assistant replied: hello",
        "* 🟢 (09:40) Signal: 19 minutes later",
    ]
    assert lines[6] == "</observations>"  # tool lines are not reported
