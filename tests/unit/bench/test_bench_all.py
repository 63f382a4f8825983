"""`python -m bench` (bench/__main__.py), bench.model_bound, bench.original and the options added to
bench.e2e: their command lines, tables and parsers, without a broker (the broker runs are the
benchmarks themselves)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as bench_all
from bench import model_bound, original
from bench.e2e import _parser, options_from
from bench.e2e_env import Options, config_text, worker_roles
from omstream.settings import load_settings

ORIGINAL = {"node": "v20", "versions": {"@mastra/memory": "1.31.0"}, "message_tokens": 3000, "runs": [
    {"run": "buffering on", "messages": 2000, "seconds": 50.0, "messages_per_s": 40.0, "cpu_seconds": 30.0,
     "observer_calls": 998, "reflector_calls": 2, "assistant_calls": 1000},
    {"run": "buffering off", "messages": 2000, "seconds": 40.0, "messages_per_s": 50.0, "cpu_seconds": 20.0,
     "observer_calls": 131, "reflector_calls": 0, "assistant_calls": 1000}]}
FOLD = {"rows": [{"scenario": "raw count_message", "threads": 1, "messages": 2000, "messages_per_s": 9e9,
                  "observe_cycles": None},
                 {"scenario": "fold ingest 1x2000", "threads": 1, "messages": 2000, "messages_per_s": 2000.0,
                  "observe_cycles": 159}]}
E2E = {"sustained": [{"steps": False, "messages": 4000, "messages_per_s": 400.0,
                      "changelog": {"bytes_per_message": 2048, "records_per_message": 4.2}}],
       "loads": [{"offered_per_s": 500, "drain_seconds": 0.4,
                  "status": {"n": 10, "p50_ms": 40.0, "p99_ms": 90.0, "max_ms": 95.0},
                  "activation": {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}}]}
DELIVERY_OUT = ("starting a broker on 127.0.0.1:1 (data in /tmp/x)\n"
                "aiokafka getmany: 20,000 records in 0.17 s = 116,047/s, 4 us CPU per record\n"
                "faust (the worker's path): 20,000 records in 0.26 s = 76,478/s, 40 batches, 12 us CPU per record\n")


def done_step(name: str, result: object, error: str | None = None) -> bench_all.Step:
    step = next(s for s in bench_all.steps() if s.name == name)
    step.result, step.error, step.seconds, step.load = result, error, 12.0, (1.0, 2.0)
    return step


def test_table_prints_each_figure_with_its_command_and_ratios_to_the_original_of_the_run():
    steps = [done_step("original", ORIGINAL), done_step("fold", FOLD), done_step("e2e-1", E2E),
             done_step("delivery", DELIVERY_OUT)]
    text = bench_all.table(steps, "today", 600.0)
    print(text)
    for step in steps:
        assert f"$ {step.command}" in text
    # The fold (CPU time) against the original's messages per CPU-second, buffering off (2000 / 20 s).
    assert "2,000  messages/CPU-s  20.0x" in text
    # End to end against the original's wall rate with buffering on (40/s) and its CPU rate (2000 / 30 s).
    assert "400  messages/s  10.0x (wall; 6.0x its per-CPU-second rate)" in text
    assert "40 / 90" in text and "KiB" in text
    assert "116,047" in text and "76,478" in text and "12 us CPU per record" in text
    assert "raw count_message" not in text
    assert "python -m bench.quality" in text


def test_table_without_the_original_has_no_ratios_and_says_what_failed():
    steps = [done_step("original", {"error": "npm ci failed"}, error="exit 1"), done_step("fold", FOLD)]
    text = bench_all.table(steps, "today", 60.0)
    assert "could not run: npm ci failed" in text and "FAILED: exit 1" in text
    assert "2,000  messages/CPU-s  -" in text


def test_every_step_runs_a_module_of_bench_with_options_it_accepts():
    for step in bench_all.steps():
        assert (Path(bench_all.ROOT) / "bench" / f"{step.module}.py").exists()
    e2e_steps = [s for s in bench_all.steps() if s.module == "e2e"]
    parsed = [options_from(_parser().parse_args(s.args)) for s in e2e_steps]
    assert [(o.fold_workers, o.encrypt) for o in parsed] == [(1, False), (1, True), (2, False)]


def test_the_sealed_run_is_shown_as_a_share_of_the_plain_one():
    def run(steps: bool, rate: float) -> dict:
        return {"steps": steps, "messages": 4000, "messages_per_s": rate}
    plain = done_step("e2e-1", {"sustained": [run(False, 200.0), run(True, 250.0)]})
    sealed = done_step("e2e-sealed", {"sustained": [run(False, 190.0), run(True, 200.0)]})
    text = bench_all.table([plain, sealed], "today", 60.0)
    assert "0.95 of the same run without encryption" in text and "0.80 of the same run" in text


def test_only_refuses_an_unknown_benchmark(capsys):
    with pytest.raises(SystemExit) as exc:
        bench_all.main(["--only", "fold,nope"])
    assert exc.value.code == 2 and "nope" in capsys.readouterr().err


def test_e2e_roles_and_config():
    assert worker_roles(Options()) == ["all"]
    assert worker_roles(Options(fold_workers=2)) == ["fold", "fold", "models"]
    options = options_from(_parser().parse_args(["--fold-workers", "1", "--model-latency", "2000",
                                                 "--model-concurrency", "32", "--no-state"]))
    assert (options.fold_workers, options.model_latency_ms, options.model_concurrency, options.state) == \
        (1, 2000, 32, False)
    assert options_from(_parser().parse_args([])).state is True


def test_e2e_config_text_is_a_valid_configuration(tmp_path):
    path = tmp_path / "om.toml"
    path.write_text(config_text(Options(model_latency_ms=2000, model_concurrency=32), "e2ex", "127.0.0.1:9", tmp_path))
    settings = load_settings(path)
    assert settings.model_concurrency == 32 and settings.namespace == "e2ex"
    assert "latencyMs = 2000" in path.read_text()
    path.write_text(config_text(Options(encrypt=True), "e2ex", "127.0.0.1:9", tmp_path))
    assert len(load_settings(path).namespace_key) >= 32


def test_model_bound_report():
    assert model_bound.interval_messages(Options()) == pytest.approx(3.0)
    point = model_bound.Point(concurrency=4, threads=16, messages=96, cycles=16, failed=0, seconds=8.0,
                              cycles_per_s=2.0, ceiling_per_s=2.0, messages_per_cycle=6.0,
                              messages_per_s_bound=6.0, threads_sustained=60.0)
    report = {"command": "python -m bench.model_bound", "summary": "s", "pace": 10.0, "latency_ms": 2000,
              "points": [point.__dict__]}
    assert "16 x 6" in model_bound.format_report(report)
    rows = bench_all.model_bound_rows(report, {})
    assert rows[0][1] == "2.00" and "60 threads at 1 message / 10 s" in rows[0][3]


def test_replay_rows_show_every_pass_the_replay_bench_reports():
    # The shape `bench.replay` writes (its `passes`, one per path and cache state).
    def one(calls: int, hits: int, rate: float, **extra: object) -> dict[str, object]:
        return {"modelCalls": calls, "cacheHits": hits, "foldRecordsPerS": rate, **extra}

    report = {"messages": 4000, "threads": 40, "passes": {
        "worker cold": one(1493, 0, 416.1), "worker warm": one(0, 1493, 1058.5),
        "bulk cold": one(1493, 0, 341.9, handoverS=4.0), "bulk warm": one(0, 1493, 2156.2, handoverS=3.9)}}
    rows = bench_all.replay_rows(report, {})
    assert [r[0].split(",")[0] for r in rows] == ["replay worker cold", "replay worker warm", "replay bulk cold",
                                                   "replay bulk warm"]
    assert rows[3][1] == "2,156" and rows[3][3] == "0 calls, 1493 cache hits; hand-over 3.9 s"


def test_original_report():
    text = original.format_report(ORIGINAL)
    assert "buffering on" in text and "998" in text and "@mastra/memory 1.31.0" in text


def test_the_original_runs_a_few_turns(tmp_path):
    original.ensure_installed()  # from the lock file; .ci/run installs it first, visibly
    bodies = tmp_path / "bodies.json"
    bodies.write_text(json.dumps(["a message of the conversation " * 30] * 10))
    done = subprocess.run(["node", str(original.HERE / "run.mjs"), "--bodies", str(bodies), "--messages", "40",
                           "--buffering", "off"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(result)
    (run,) = result["runs"]
    assert run["messages"] == 40 and run["assistant_calls"] == 20 and run["messages_per_s"] > 0


def test_help_of_the_new_modules():
    for module in ("bench", "bench.model_bound", "bench.original"):
        done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "usage" in done.stdout, done.stderr
