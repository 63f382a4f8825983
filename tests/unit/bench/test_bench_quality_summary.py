"""`python -m bench.quality --conversations`: several conversations' runs, one table over them.
The figures are combined as the summary says (categories pooled by question, overall as the mean
of the conversations), checked against numbers worked out by hand, and end to end with the
scripted models over two synthetic conversations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import quality
from bench.quality_summary import combine, format_summary, parse_conversations
from tests.unit.bench.test_bench_quality_resume import SCRIPTED, _conversation


def test_conversation_lists():
    assert parse_conversations("0-4") == [0, 1, 2, 3, 4]
    assert parse_conversations("3,1,1-2") == [3, 1, 2]
    for bad in ("", "a", "4-2"):
        with pytest.raises(ValueError):
            parse_conversations(bad)


def _report(n: int, f1: dict[str, dict[str, float]], counts: dict[str, int], outputs: dict[str, int]) -> dict[str, Any]:
    return {"conversation": n, "sampleId": f"s{n}", "fullConversation": True, "f1": f1,
            "questionsPerCategory": counts, "observerOutputs": outputs,
            "recall": {"cap": 2, "calls": n + 1, "questions": 4, "questionsUsingRecall": 1, "capReached": 0,
                       "noAnswerPastCap": 0}}


def test_categories_pool_questions_and_overall_is_the_mean_of_the_conversations():
    one = _report(0, {"omstream": {"2": 0.5, "4": 1.0, "overall": 0.75}}, {"2": 1, "4": 3},
                  {"clean": 3, "recovered": 1})
    two = _report(1, {"omstream": {"2": 0.2, "overall": 0.2}}, {"2": 3}, {"clean": 4, "failed": 0})
    summary = combine([one, two])
    # temporal: (0.5 * 1 + 0.2 * 3) / 4 questions; single-hop only in the first; overall (0.75 + 0.2) / 2
    assert summary["f1"]["omstream"] == {"2": 0.275, "4": 1.0, "overall": 0.475}
    assert summary["questionsPerCategory"] == {"2": 4, "4": 3}
    assert summary["observerOutputs"] == {"clean": 7, "recovered": 1, "failed": 0}
    assert summary["observerOutputShares"] == {"clean": 0.875, "recovered": 0.125, "failed": 0.0}
    assert summary["recall"]["calls"] == 3 and summary["recall"]["questions"] == 8
    table = format_summary(summary)
    assert "| omstream | 0.275 | 1.000 | 0.475 | 0.750 | 0.200 |" in table
    assert "Observer answers: clean 7 (88%), recovered 1 (12%), failed 0 (0%)" in table


def test_several_conversations_run_one_after_the_other_and_are_summarised(tmp_path: Path, capsys):
    data = tmp_path / "locomo-two.json"
    first = _conversation()[0]
    data.write_text(json.dumps([first, {**first, "sample_id": "synthetic-second"}]), encoding="utf-8")
    out = tmp_path / "bench" / "summary.json"
    code = quality.main(["--data", str(data), "--conversations", "0-1", "--questions", "6",
                         "--message-tokens", "500", "--observation-tokens", "800", "--no-speed",
                         "--checkpoints", str(tmp_path / "checkpoints"), "--out", str(out), *SCRIPTED])
    assert code == 0
    summary = json.loads(out.read_text())
    reports = [json.loads((out.parent / f"quality-conv{n}.json").read_text()) for n in (0, 1)]
    assert [r["sampleId"] for r in reports] == ["synthetic-resume", "synthetic-second"]
    assert summary == {**combine(reports), "command": summary["command"]}
    assert set(summary["f1"]) == {"omstream", "recent", "full", "none"}
    printed = capsys.readouterr().out
    assert "=== conversation 1 (2 of 2)" in printed and "| condition |" in printed
    assert "mean of 2 conversations" in printed
