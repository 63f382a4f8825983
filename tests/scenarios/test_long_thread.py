"""The recorded long-thread run of the original, reproduced line for line by `om simulate`.

Parity mode (tokenx, UTC) with the scripted Observer and Reflector, through the real litellm
path: every status window, every cycle's `tokensToObserve` and `observationTokens`, both
reflections and the final record must equal `expected-sync-timeline.txt`.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from omstream.conversations.files import read_conversation
from omstream.conversations.simulation import format_timeline, parity_config, run, simulate
from omstream.projections.views.context import ContextProjection
from omstream.schemas.codec import decode_event
from omstream.schemas.config import load_om_config
from tests.helpers import LONG_THREAD, recorded_config

SCENARIO = LONG_THREAD
EXPECTED = SCENARIO / "expected-sync-timeline.txt"


def _recorded_config() -> dict:
    return recorded_config(EXPECTED)


def _expected_lines() -> list[str]:
    return [line.strip() for line in EXPECTED.read_text().splitlines()
            if re.match(r"^  (status|observation-)", line)]


@pytest.fixture(scope="module")
def run_once():
    om = parity_config(load_om_config(_recorded_config()))
    return asyncio.run(simulate(read_conversation(SCENARIO / "conversation.jsonl"), om))


def test_every_status_and_cycle_line_matches_the_recording(run_once):
    assert format_timeline(run_once.events) == _expected_lines()


def test_totals_and_final_record(run_once):
    summary = json.loads(EXPECTED.read_text().splitlines()[-1].removeprefix("# summary "))
    kinds = [job.kind for job in run_once.jobs]
    assert kinds.count("observe") == summary["modelCalls"]["observer"] == 20
    assert kinds.count("reflect") == summary["modelCalls"]["reflector"] == 2
    for kind, count in summary["eventCounts"].items():
        assert sum(e.type == kind for e in run_once.events) == count
    state = run_once.states["thread:thread-long"]
    assert (state.generation, state.observation_tokens) == (2, 2794)
    assert state.cursor.isoformat() == "2025-03-03T09:59:00+00:00"


def test_the_cli_writes_a_reproducible_event_log(tmp_path):
    config = tmp_path / "om.json"
    config.write_text(json.dumps(_recorded_config()))
    logs = []
    for name in ("a.jsonl", "b.jsonl"):
        out = tmp_path / name
        run(SCENARIO / "conversation.jsonl", load_om_config(json.loads(config.read_text())),
            out=out, parity=True, measured_time=False, timeline=False)
        logs.append(out.read_bytes())
    assert logs[0] == logs[1]
    events = [decode_event(line) for line in logs[0].splitlines()]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def test_the_context_projection_rebuilds_the_final_memory_from_the_log(run_once):
    projection = ContextProjection()
    for event in run_once.events:
        projection.apply_event(event)
    view, state = projection.view("thread-long"), run_once.states["thread:thread-long"]
    assert (view.generation, view.observations) == (state.generation, state.observations)
    assert [m.id for m in view.unobserved()] == list(state.pending_ids)


def test_om_simulate_command(tmp_path, capsys):
    from omstream.cli import main

    config = tmp_path / "om.yaml"
    config.write_text(json.dumps(_recorded_config()))  # JSON is YAML
    out = tmp_path / "events.jsonl"
    assert main(["simulate", str(SCENARIO / "conversation.jsonl"), "--config", str(config),
                 "--parity", "--timeline", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines() == _expected_lines()
    summary = json.loads(printed.err[printed.err.index("{"):])
    assert summary["modelCalls"] == {"observer": 20, "reflector": 2}
    assert len(out.read_bytes().splitlines()) == sum(summary["events"].values())
    assert main(["simulate", str(tmp_path / "missing.jsonl")]) == 2
