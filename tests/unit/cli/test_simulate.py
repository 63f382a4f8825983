"""`om simulate` says when its model cycles failed, and exits 1: a run whose every cycle failed
(no model key) used to print its summary and exit 0.  `examples/simulate.toml` is the options
file the command's help names, and it runs offline."""

from types import SimpleNamespace

import orjson
import pytest

from omstream.cli import main
from omstream.cli.common import EXAMPLES
from omstream.conversations.simulation import CycleCount, cycle_count

CONVERSATION = EXAMPLES / "demo-conversation.jsonl"
OPTIONS = EXAMPLES / "simulate.toml"


@pytest.fixture(autouse=True)
def no_keys(monkeypatch):
    import os

    for name in [n for n in os.environ if n.startswith("OM_") or n.endswith("_API_KEY")]:
        monkeypatch.delenv(name)


def summary_of(err: str) -> dict:
    return orjson.loads(err[err.index("{"): err.rindex("}") + 1])


def test_the_example_options_simulate_the_demo_offline(capsys):
    assert main(["simulate", str(CONVERSATION), "--config", str(OPTIONS)]) == 0
    summary = summary_of(capsys.readouterr().err)
    assert summary["cycles"]["started"] >= 2 and summary["cycles"]["failed"] == 0
    assert summary["events"]["data-om-activation"] >= 1


def test_a_run_whose_cycles_all_failed_says_so_and_exits_1(tmp_path, capsys):
    options = tmp_path / "no-key.toml"
    options.write_text(OPTIONS.read_text().replace("scripted/observer", "openai/gpt-4o-mini")
                       .replace("scripted/reflector", "openai/gpt-4o-mini"))
    assert main(["simulate", str(CONVERSATION), "--config", str(options)]) == 1
    err = capsys.readouterr().err
    started = summary_of(err)["cycles"]["started"]
    assert started >= 2 and summary_of(err)["cycles"]["failed"] == started
    last = err.splitlines()[-1]
    assert last.startswith(f"om simulate: {started} of {started} model cycles failed; the first: ")
    assert "OPENAI_API_KEY" in last


@pytest.mark.parametrize("count, line", [
    (CycleCount(3, 0), None),
    (CycleCount(3, 1, "timeout"), "1 of 3 model cycles failed; the first: timeout"),
    (CycleCount(1, 1), "1 of 1 model cycle failed"),
])
def test_the_failure_line_counts_the_failed_of_the_started(count, line):
    assert count.failure_line() == line


def _event(kind: str, record: str, error: str = "") -> SimpleNamespace:
    return SimpleNamespace(type=f"data-om-observation-{kind}", data=SimpleNamespace(
        operation_type="reflection", thread_id="t1", record_id=record, error=error))


def test_a_reflection_ladder_is_one_cycle_and_fails_only_when_it_gives_up():
    rung = [_event("start", "r1"), _event("failed", "r1", "Did not compress below threshold"),
            _event("start", "r1"), _event("end", "r1")]
    assert cycle_count(rung) == CycleCount(1, 0)
    gave_up = [*rung[:3], _event("failed", "r1", "Reflector produced empty output")]
    assert cycle_count(gave_up) == CycleCount(1, 1, "Reflector produced empty output")
    # A failure followed by the start of another record's cycle is a failure, and a new cycle.
    other = [_event("start", "r1"), _event("failed", "r1", "HTTP 500"), _event("start", "r2")]
    assert cycle_count(other) == CycleCount(2, 1, "HTTP 500")
