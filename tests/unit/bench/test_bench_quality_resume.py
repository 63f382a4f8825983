"""bench.quality end to end with the scripted models through the real litellm path: a run
stopped anywhere resumes without repeating a model call, checkpoints follow their inputs,
and the per-question inspection file is written.

The conversation is synthetic, written here in LoCoMo's JSON shape (the real data set is
CC BY-NC and never enters the repository; its conversations 5-9 are held out)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench import quality

SCRIPTED = ["--observer", "scripted/observer", "--reflector", "scripted/reflector", "--reader", "scripted/assistant"]
TOPICS = ["pottery class", "marathon in Oslo", "adopting a cat called Pixel", "painting sunsets by the lake",
          "a new job at the library", "camping in the mountains"]


def _turns(session: int) -> list[dict[str, Any]]:
    turns = []
    for i in range(12):
        speaker = "Ada" if i % 2 == 0 else "Bo"
        topic = TOPICS[(session + i) % len(TOPICS)]
        turns.append({"speaker": speaker, "dia_id": f"D{session}:{i + 1}",
                      "text": f"Session {session} turn {i + 1}: I keep thinking about the {topic}, it was "
                              f"really something special and I want to tell you every detail of it soon."})
    return turns


def _conversation() -> list[dict[str, Any]]:
    conv: dict[str, Any] = {"speaker_a": "Ada", "speaker_b": "Bo"}
    for s, date in enumerate(["9:05 am on 2 March, 2024", "7:40 pm on 15 April, 2024",
                              "1:10 pm on 1 May, 2024"], start=1):
        conv[f"session_{s}_date_time"] = date
        conv[f"session_{s}"] = _turns(s)
    qa = [
        {"question": "What class did Ada mention first?", "answer": "pottery class", "evidence": ["D1:6"], "category": 4},
        {"question": "Where was the marathon?", "answer": "Oslo", "evidence": ["D1:1"], "category": 4},
        {"question": "When did Bo talk about camping?", "answer": "15 April 2024", "evidence": ["D2:4"], "category": 2},
        {"question": "What hobbies come up?", "answer": "painting, pottery", "evidence": ["D1:3", "D3:4"], "category": 1},
        {"question": "Would Ada like a library job?", "answer": "Likely yes", "evidence": ["D3:12"], "category": 3},
        {"question": "What is Bo's dog called?", "adversarial_answer": "Pixel", "evidence": ["D1:2"], "category": 5},
    ]
    return [{"sample_id": "synthetic-resume", "conversation": conv, "qa": qa}]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "locomo-synthetic.json"
    path.write_text(json.dumps(_conversation()), encoding="utf-8")
    return path


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every model call that reaches litellm (the Observer's, Reflector's and reader's), by model."""
    from omstream.models import calls as model_calls

    made: list[str] = []
    real = model_calls.complete

    async def counted(model: str, *args: Any, **kwargs: Any) -> Any:
        made.append(model)
        return await real(model, *args, **kwargs)

    monkeypatch.setattr(model_calls, "complete", counted)
    return made


def run(data: Path, root: Path, *extra: str) -> tuple[int, dict[str, Any] | None]:
    out = root / "report.json"
    if out.exists():
        out.unlink()
    code = quality.main(["--data", str(data), "--questions", "6", "--message-tokens", "500",
                         "--observation-tokens", "800", "--checkpoints", str(root / "checkpoints"),
                         "--out", str(out), *SCRIPTED, *extra])
    return code, json.loads(out.read_text()) if out.exists() else None


def test_a_run_stopped_anywhere_resumes_without_repeating_a_call(data, tmp_path, calls, capsys):
    code, whole = run(data, tmp_path / "whole")
    assert code == 0 and whole is not None
    total = len(calls)
    ingest_calls = whole["modelCallsMade"]["ingest"]
    print(f"uninterrupted: {total} model calls ({whole['modelCallsMade']}), "
          f"{whole['observerCalls']} observer / {whole['reflectorCalls']} reflector")
    assert whole["observerCalls"] >= 2 and ingest_calls == whole["observerCalls"] + whole["reflectorCalls"]
    assert total == sum(whole["modelCallsMade"].values()) == ingest_calls + 4 * 6

    # The same run stopped every 4 calls: each run makes its 4 calls and stops, the last one ends.
    calls.clear()
    runs, made, phases = 0, [], []
    capsys.readouterr()
    while True:
        before = len(calls)
        code, report = run(data, tmp_path / "stopped", "--stop-after-calls", "4")
        made.append(len(calls) - before)
        runs += 1
        if code == 0:
            break
        assert code == 3 and made[-1] == 4 and runs < 40
        phases.append(re.search(r"in phase (ingest|answer \w+)", capsys.readouterr().err).group(1))
    print(f"stopped every 4 calls: {runs} runs, calls per run {made}, {len(calls)} in all; stopped in {phases}")
    assert len(calls) == total  # no call made twice
    assert report is not None
    assert report["f1"] == whole["f1"] and report["observations"] == whole["observations"]
    assert report["contextTokens"] == whole["contextTokens"]
    # Runs stopped within the ingest and within answer phases (and were resumed there).
    assert "ingest" in phases and {"answer omstream", "answer none"} <= set(phases)

    calls.clear()
    code, again = run(data, tmp_path / "stopped")
    assert code == 0 and calls == [] and again is not None
    assert again["modelCallsMade"] == {} and again["checkpoints"]["ingest"]["checkpoint"] is True
    assert again["checkpoints"]["answersFromCheckpoint"] == {"omstream": 6, "recent": 6, "full": 6, "none": 6}


def test_checkpoints_follow_their_inputs(data, tmp_path, calls, capsys):
    assert run(data, tmp_path)[0] == 0
    capsys.readouterr()
    calls.clear()
    # Another memory configuration: a new ingest and new omstream/recent windows, but the whole
    # conversation's answers (and no context's) depend only on conversation, reader, questions.
    code, report = run(data, tmp_path, "--message-tokens", "700")
    assert code == 0 and report is not None
    printed = capsys.readouterr().out
    print(f"after --message-tokens 700: calls {report['modelCallsMade']}")
    assert report["checkpoints"]["ingest"]["checkpoint"] is False
    assert report["checkpoints"]["answersFromCheckpoint"]["full"] == 6
    assert report["checkpoints"]["answersFromCheckpoint"]["none"] == 6
    assert "answer full: 6 of 6 answers from the checkpoint" in printed and "computed once" in printed
    assert "answer full" not in report["modelCallsMade"] and "answer none" not in report["modelCallsMade"]
    assert report["modelCallsMade"]["answer omstream"] == 6

    # Another reader: every answer is asked again (the ingest is reused: same observer).
    calls.clear()
    code, report = run(data, tmp_path, "--reader", "scripted/reflector")
    assert code == 0 and report is not None
    assert report["checkpoints"]["ingest"]["checkpoint"] is True
    assert report["modelCallsMade"] == {f"answer {c}": 6 for c in quality.CONDITIONS}
    assert set(calls) == {"scripted/reflector"}


def test_the_inspection_file_has_every_condition_and_the_evidence_landing(data, tmp_path, capsys):
    code, report = run(data, tmp_path, "--message-tokens", "500")
    assert code == 0 and report is not None
    rows = [json.loads(line) for line in Path(report["questionsFile"]).read_text().splitlines()]
    assert len(rows) == 6
    for row in rows:
        assert set(row["conditions"]) == set(quality.CONDITIONS)
        for figures in row["conditions"].values():
            assert {"contextTokens", "reply", "prediction", "score"} <= set(figures)
        assert row["recentWindow"] in ("inside", "outside")
        assert [land["evidence"] for land in row["landing"]] == row["evidence"]
        assert all(land["where"] in ("raw", "observations", "none") for land in row["landing"])
    where = [land["where"] for row in rows for land in row["landing"]]
    print(f"evidence landing: {where}; split {report['f1ByRecentWindow']}")
    # The scripted Observer copies each turn's first words, so early evidence is found in lines.
    assert "observations" in where
    assert set(report["f1ByRecentWindow"]) <= {"inside", "outside"}
    assert sum(v["n"] for v in report["f1ByRecentWindow"].values()) == 6
    printed = capsys.readouterr().out
    assert "worst regressions of omstream against recent" in printed
    assert "| evidence vs recent window | n | omstream | recent | full | none |" in printed
    assert "scripted (fixed rules, not a language model" in printed


def test_roles_default_to_model_and_the_reflector_follows_the_observer():
    args = quality.parse_args(["--model", "m", "--observer", "o"])
    assert quality.roles(args) == {"observer": "o", "reflector": "o", "reader": "m"}
    args = quality.parse_args(["--reader", "r"])
    assert quality.roles(args) == {"observer": quality.DEFAULT_MODEL, "reflector": quality.DEFAULT_MODEL,
                                   "reader": "r"}


def test_a_hosted_model_without_its_key_stops_the_run_before_any_work(data, tmp_path, monkeypatch, calls):
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit, match="--reader gemini/gemini-2.5-flash: its key is not in the environment"):
        run(data, tmp_path, "--reader", "gemini/gemini-2.5-flash")
    assert calls == [] and not list((tmp_path / "checkpoints").glob("conv0/calls-*.jsonl"))
