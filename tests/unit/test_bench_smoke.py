"""The fold benchmark runs end to end and reports sane rows (shape and signs, never timings)."""

import contextlib
import io
import json

import pytest

from bench.fold_bench import main

ROW_KEYS = {
    "scenario", "counter", "threads", "messages", "tokens", "seconds", "messages_per_s",
    "tokens_per_s", "observe_cycles", "reflect_cycles", "jobs", "message_tokens",
    "observation_tokens", "vs_raw",
}


@pytest.fixture(scope="module")
def quick() -> dict:
    """One `--quick --json` run, shared by the tests of this module."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["--quick", "--json"]) == 0
    return json.loads(printed.getvalue())


def test_quick_run_reports_every_scenario_for_both_counters(quick):
    out = quick
    rows = out["rows"]
    assert out["benchmark"] == "fold"
    assert {r["counter"] for r in rows} == {"tiktoken", "tokenx"}
    per_counter = {c: [r["scenario"] for r in rows if r["counter"] == c] for c in ("tiktoken", "tokenx")}
    assert per_counter["tiktoken"] == per_counter["tokenx"]
    scenarios = per_counter["tiktoken"]
    assert scenarios[0] == "raw count_message"
    assert sum(s.startswith("fold ingest") for s in scenarios) == 2
    assert sum(s.startswith("fold precounted") and "reflect" not in s for s in scenarios) == 2
    assert sum("reflect" in s for s in scenarios) == 1
    assert set(out["tokenx_vs_tiktoken"]) == set(scenarios)
    assert all(v > 0 for v in out["tokenx_vs_tiktoken"].values())

    for row in rows:
        assert set(row) >= ROW_KEYS, row
        assert row["messages"] > 0 and row["tokens"] > row["messages"] * 100  # ~500-token messages
        assert row["seconds"] > 0 and row["messages_per_s"] > 0 and row["tokens_per_s"] > 0
        assert row["vs_raw"] > 0
        if row["scenario"] == "raw count_message":
            assert row["observe_cycles"] is None and row["vs_raw"] == pytest.approx(1.0)
            continue
        assert row["jobs"] >= row["observe_cycles"] + row["reflect_cycles"]
        if row["threads"] == 1:  # one long thread crosses messageTokens: cycles really ran
            assert row["observe_cycles"] > 0
        if "reflect" in row["scenario"]:
            assert row["reflect_cycles"] > 0


def test_both_layouts_fold_the_same_messages(quick):
    rows = quick["rows"]
    main_rows = [r for r in rows if r["scenario"].startswith(("fold ingest", "fold precounted 1x",
                                                              "fold precounted 100x"))
                 and "reflect" not in r["scenario"]]
    for counter in ("tiktoken", "tokenx"):
        mine = [r for r in main_rows if r["counter"] == counter]
        assert len({(r["messages"], r["tokens"]) for r in mine}) == 1
        assert {r["threads"] for r in mine} == {1, 100}


def test_table_output_and_bad_sizes(capsys):
    assert main(["--messages", "20", "--threads", "10", "--counter", "tiktoken"]) == 0
    table = capsys.readouterr().out
    assert "messages/s" in table and "tokens/s" in table and "fold precounted 10x2" in table
    with pytest.raises(SystemExit):
        main(["--messages", "300", "--threads", "100"])
