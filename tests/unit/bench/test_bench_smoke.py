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


# --- bench.e2e: the command line and its pure helpers (no broker) ------------------------------
def test_e2e_help_exits_0():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "bench.e2e", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout and "--loads" in done.stdout and "--counter" in done.stdout


def test_e2e_options_quick_then_explicit():
    from bench.e2e import _parser, options_from
    from bench.e2e_env import Options

    assert options_from(_parser().parse_args([])) == Options()
    quick = options_from(_parser().parse_args(["--quick", "--loads", "50,70", "--counter", "tiktoken"]))
    assert quick.loads == (50, 70) and quick.counter == "tiktoken"
    assert quick.threads * quick.messages < Options().threads * Options().messages
    with pytest.raises(SystemExit):
        _parser().parse_args(["--loads", "0"])


def test_e2e_percentile():
    from bench.e2e_stats import Latency, percentile

    assert percentile([], 50) is None
    assert percentile([7.0], 99) == 7.0
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 0) == 1 and percentile([1, 2, 3, 4], 100) == 4
    assert percentile(list(range(101)), 99) == pytest.approx(99)
    latency = Latency.of([0.001, 0.002, 0.003])
    assert latency.n == 3 and latency.p50_ms == pytest.approx(2) and latency.max_ms == pytest.approx(3)


def test_e2e_state_bytes_latest_value_per_key_and_tombstones():
    from bench.e2e_stats import live_sizes, memory_state_bytes

    sizes = live_sizes([
        (b"thread:t1", b"x" * 10),           # overwritten below
        (b"thread:t1", b"x" * 4),            # the bare key (one-value layout): 9 + 4
        (b"thread:t1\x00obs", b"y" * 5),     # a part of the same memory (split layout): 13 + 5
        (b"thread:t1\x00gone", b"z"),        # deleted below
        (b"thread:t10", b"w" * 100),         # another memory with the same prefix: not counted
        (b"thread:t1\x00gone", None),        # tombstone
    ])
    assert memory_state_bytes(sizes, b"thread:t1") == (13 + 18, 2)
    assert memory_state_bytes(sizes, b"thread:t10") == (110, 1)
    assert memory_state_bytes(sizes, b"thread:t2") == (0, 0)
    live_sizes([(b"thread:t1", None)], sizes)  # incremental: later records update the same map
    assert memory_state_bytes(sizes, b"thread:t1") == (18, 1)


def test_e2e_matches_statuses_and_activations_in_fold_order():
    from bench.e2e_stats import message_status_times, step_times

    seen = [
        ("accepted", "m0", 1.0), ("status", None, 1.1),       # a per-message check
        ("accepted", "m1", 2.0),                               # held by a cycle ...
        ("status", None, 2.5),                                 # ... its status when released
        ("accepted", "m2", 3.0), ("status", 0, 3.2),           # per-step: the step's status
        ("activation", None, 4.1), ("activation", None, 4.2), ("status", 0, 4.3),
        ("activation", None, 5.0), ("status", None, 5.1),      # a model result's, no step's
        ("status", 1, 6.0),
    ]
    assert message_status_times(seen) == {"m0": 1.1, "m1": 2.5, "m2": 3.2}
    assert step_times(seen) == [(3.2, None), (4.3, 4.1), (6.0, None)]


def test_e2e_worker_rss_reads_the_process_group(tmp_path):
    from bench.e2e_stats import worker_rss_kb

    def fake(pid: int, name: str, pgrp: int, rss: int) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) S 1 {pgrp} {pgrp} 0 -1\n")
        (tmp_path / str(pid) / "status").write_text(f"Name:\t{name}\nVmHWM:\t{rss * 2} kB\nVmRSS:\t{rss} kB\n")

    fake(100, "python3.11", 100, 1000)
    fake(101, "java", 100, 5000)         # same group, not python
    fake(102, "python3.11", 200, 7000)   # another group
    (tmp_path / "self").mkdir()
    assert worker_rss_kb(100, tmp_path) == {"rss_kb": 1000, "peak_kb": 2000, "processes": 1}


def test_e2e_report_of_a_run_stopped_early_shows_what_was_measured():
    from bench.e2e import format_report

    base = {"command": "python -m bench.e2e", "summary": "one worker", "wall_seconds": 12.0,
            "out": "/tmp/e2e.json", "error": "interrupted"}
    assert "FAILED" in format_report(base) and "interrupted" in format_report(base)
    run = {"run": "r1", "steps": False, "messages": 100, "records": 100, "seconds": 2.0,
           "produce_seconds": 0.5, "messages_per_s": 124.0, "records_per_s": 124.0,
           "events": {"data-om-activation": 3}, "rss": {"rss_kb": 2048, "peak_kb": 4096},
           "changelog": {"bytes_per_message": 2048.0, "records_per_message": 1.5,
                         "kinds": {"pending": {"bytes_per_message": 1200.0, "records_per_message": 1.0}}}}
    table = format_report({**base, "sustained": [run]})
    assert "124.0" in table and "2.00x" in table and "2.0 KiB" in table and "activations 3" in table
    assert "of which pending" in table and "1,200" in table


def test_changelog_records_are_named_by_the_storage_layout():
    from bench.e2e_runs import record_kind
    from omstream.pipeline.storage import SEEN, item_key, part_key, seen_key

    key = b"thread:t1"
    assert record_kind(key, b"{}") == "core"
    assert record_kind(item_key(key, b"p", 3), b"{}") == "pending"
    assert record_kind(item_key(key, b"p", 3), None) == "pending (tombstone)"
    assert record_kind(part_key(key, b"c", 2), b"[]") == "chunks"
    assert record_kind(seen_key(key, "m1"), b"1") == "seen" and SEEN == b"s"
