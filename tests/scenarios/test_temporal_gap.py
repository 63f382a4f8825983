"""A temporal gap in the recorded long thread, number for number (issue 28, spec §14, §5.2).

No recording of the original with a gap is published (tests/fixtures/scenarios/README.md), so
the case is built from the recording and the rules: the long thread with every message from
turn 4's user message on moved 12 min 20 s later, so that message comes 13 minutes after turn
3's reply, and `temporalMarkers` on.  The original stores the marker as a `signal` message whose
one text part is `13 minutes later — 03/03/2025, 9:16 AM UTC` and counts it as any message:
tokenx("signal") 1 + 16 + 3.8 per message, rounded: 21.  Until that marker is observed, every
number of the run is the recording's, except that the windows that hold the marker count 21
more; the observation that covers it writes one more line, the scripted observer's Signal line,
and its `observationTokens` grow by exactly that line's count.
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import pytest

from omstream.conversations.files import read_conversation
from omstream.conversations.simulation import format_timeline, parity_config, simulate
from omstream.engine.rules.tokens import get_counter
from omstream.schemas.config import load_om_config
from tests.helpers import LONG_THREAD, recorded_config

EXPECTED = LONG_THREAD / "expected-sync-timeline.txt"
SHIFT = timedelta(minutes=12, seconds=20)
FIRST_LATE = 8  # turn 4's user message (two messages a turn)
CONTENTS = "13 minutes later — 03/03/2025, 9:16 AM UTC"
MARKER_TOKENS = 21


def _recorded_lines() -> list[str]:
    return [line.strip() for line in EXPECTED.read_text().splitlines()
            if re.match(r"^  (status|observation-)", line)]


@pytest.fixture(scope="module")
def gap_run():
    records = read_conversation(LONG_THREAD / "conversation.jsonl")
    records = [r if i < FIRST_LATE else r.model_copy(update={"created_at": r.created_at + SHIFT})
               for i, r in enumerate(records)]
    options = recorded_config(EXPECTED)["observationalMemory"]
    om = parity_config(load_om_config({**options, "temporalMarkers": True}))
    return asyncio.run(simulate(records, om))


def test_the_marker_is_counted_as_the_original_counts_a_signal_message(gap_run):
    [gap] = [e for e in gap_run.events if e.type == "om-temporal-gap"]
    assert (gap.data.contents, gap.data.gap_ms) == (CONTENTS, 13 * 60_000)
    tokenx = get_counter("tokenx")
    assert round(tokenx.count("signal") + tokenx.count(CONTENTS) + 3.8) == MARKER_TOKENS
    assert tokenx.count(f"<system-reminder>{CONTENTS}</system-reminder>") == 28  # the old count


def test_every_number_is_the_recordings_plus_the_marker_until_it_is_observed(gap_run):
    recorded = _recorded_lines()
    lines = format_timeline(gap_run.events)
    # Turns 0 to 3: as recorded.
    assert lines[:6] == recorded[:6]
    # Turn 4 (the marker joins the window) and turn 5's observation: 21 more.
    print("turn 4:", lines[6], "\nturn 5:", lines[7])
    assert lines[6] == recorded[6].replace("msgs=2519/", f"msgs={2519 + MARKER_TOKENS}/")
    assert lines[7] == recorded[7].replace("tokensToObserve=3763", f"tokensToObserve={3763 + MARKER_TOKENS}")
    # Its observation holds the Signal line, and counts exactly that line more.
    signal = f"* 🟢 (09:16) Signal: {CONTENTS}"
    end = next(e for e in gap_run.events if e.type == "data-om-observation-end"
               and e.data.tokens_observed == 3763 + MARKER_TOKENS)
    assert signal in end.data.observations.split("\n")
    recorded_end = re.search(r"observationTokens=(\d+)", recorded[8])
    assert recorded_end is not None and recorded[8].startswith("observation-end")
    tokens = re.search(r"observationTokens=(\d+)", lines[8])
    assert tokens is not None
    assert int(tokens.group(1)) == int(recorded_end.group(1)) + get_counter("tokenx").count(signal)
