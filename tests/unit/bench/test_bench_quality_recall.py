"""bench.quality's fifth condition, `omstream+recall`, with a scripted reader through the real
litellm path: a `RECALL:` reply is answered by the product's recall handler over the ingest's
events and its result reaches the next prompt, the number of calls per question is capped, and a
run stopped between calls resumes without asking the reader anything twice.  Also the export of
a run's Observer/Reflector answers into the parser corpus's format."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench import quality, quality_recall
from tests.unit.bench.test_bench_quality_resume import _conversation

SCRIPTED = ["--observer", "scripted/observer", "--reflector", "scripted/reflector"]
BOTH = "omstream,recent,omstream+recall"
#: Every request the test reader received, by model: its messages.
PROMPTS: list[tuple[str, list[dict[str, Any]]]] = []
_SESSION_2 = re.compile(r"^(RECALL: \S+)   \(session 2, [^)]*\)$", re.MULTILINE)


def _reply(name: str, messages: list[dict[str, Any]]) -> str:
    """`recaller/once`: copies the guide's line for session 2, then answers with the first words
    of the result; `recaller/always`: recalls whenever a guide offers it; `recaller/never`: answers.
    Without a guide (the last ask past the cap) every reader answers."""
    system = "\n".join(str(m.get("content")) for m in messages if m.get("role") == "system")
    last = str(messages[-1].get("content"))
    found = _SESSION_2.search(system)
    if name == "never" or found is None:
        return "pottery class"
    if name == "always":
        return found.group(1)
    if not last.startswith("Recall result:"):
        return found.group(1)
    return "from recall: " + " ".join(last.split()[2:8])


def _register() -> None:
    from omstream.models.calls import warm_up

    warm_up()
    import litellm
    from litellm.llms.custom_llm import CustomLLM

    class Reader(CustomLLM):
        async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            name = model.split("/", 1)[-1]
            PROMPTS.append((name, [dict(m) for m in messages]))
            text = _reply(name, messages)
            return litellm.ModelResponse(model=model, choices=[{"index": 0, "finish_reason": "stop",
                                                                "message": {"role": "assistant", "content": text}}],
                                         usage={"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13})

    if not any(p.get("provider") == "recaller" for p in litellm.custom_provider_map):
        litellm.custom_provider_map = [*litellm.custom_provider_map, {"provider": "recaller", "custom_handler": Reader()}]
        litellm.utils.custom_llm_setup()  # type: ignore[no-untyped-call]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    _register()
    PROMPTS.clear()
    path = tmp_path / "locomo-synthetic.json"
    path.write_text(json.dumps(_conversation()), encoding="utf-8")
    return path


def run(data: Path, root: Path, reader: str, *extra: str) -> tuple[int, dict[str, Any] | None]:
    out = root / "report.json"
    if out.exists():
        out.unlink()
    code = quality.main(["--data", str(data), "--questions", "6", "--message-tokens", "500",
                         "--observation-tokens", "800", "--checkpoints", str(root / "checkpoints"),
                         "--out", str(out), "--no-speed", "--conditions", BOTH, "--reader", reader,
                         *SCRIPTED, *extra])
    return code, json.loads(out.read_text()) if out.exists() else None


def test_a_recall_runs_through_the_handler_and_its_result_reaches_the_next_prompt(data, tmp_path, capsys):
    code, report = run(data, tmp_path, "recaller/once")
    assert code == 0 and report is not None
    recall = report["recall"]
    print(f"recall figures: {recall}; f1 {report['f1']}")
    assert recall == {"cap": 2, "calls": 6, "questions": 6, "questionsUsingRecall": 6, "refused": 0,
                      "capReached": 0, "recallPastCap": 0, "noAnswerPastCap": 0}
    assert report["modelCallsMade"]["answer omstream+recall"] == 12
    rows = [json.loads(line) for line in Path(report["questionsFile"]).read_text().splitlines()]
    first = rows[0]["conditions"]["omstream+recall"]
    assert first["recallCalls"] == 1 and first["readerCalls"] == 2
    call = first["recalls"][0]
    thread = "locomo-synthetic-resume"
    # The guide's line for session 2 pages on from session 1's last message (12 turns).
    assert call["request"] == f"RECALL: {thread}:1:12"
    assert call["params"] == {"mode": "messages", "cursor": f"{thread}:1:12"} and call["error"] is None
    # The handler pages forward from the cursor: session 2 from its first turn, with the ids.
    assert "Session 2 turn 1: I keep thinking about" in call["result"]
    assert f"{thread}:2:1" in call["result"] and "Session 1 turn 12:" not in call["result"]
    # ... and the second prompt carries the reader's recall line and that result, then the question.
    second = next(messages for name, messages in PROMPTS if messages[-1]["content"].startswith("Recall result:"))
    assert second[-2] == {"role": "assistant", "content": f"RECALL: {thread}:1:12"}
    assert second[-1]["content"].startswith("Recall result:\n" + call["result"])
    assert second[-1]["content"].endswith(rows[0]["question"]) or "Question:" in second[-1]["content"]
    assert first["prediction"].startswith("from recall:")
    # The window is condition omstream's, the guide after it.
    window = PROMPTS[0][1][:-1]  # condition omstream's first request: the window, then the question
    assert second[:-4] == window and second[-4]["role"] == "system" and second[-4]["content"].startswith(
        "You can read the original messages")
    assert second[-3] == PROMPTS[0][1][-1]  # the same question
    printed = capsys.readouterr().out
    assert "| omstream+recall |" in printed and "recall (omstream+recall, at most 2 per question): 6 calls" in printed
    split = report["f1ByRecentWindow"]
    assert split and all({"n", "omstream", "recent", "omstream+recall"} == set(row) for row in split.values())
    assert "| evidence vs recent window | n | omstream | recent | omstream+recall |" in printed


def test_the_cap_holds(data, tmp_path):
    code, report = run(data, tmp_path, "recaller/always", "--recall-calls", "1")
    assert code == 0 and report is not None
    assert report["recall"]["calls"] == 6 and report["recall"]["capReached"] == 6
    # Past the cap it is asked once more without the option (no guide), so every question ends
    # with an answer even from a reader that recalls whenever it may.
    assert report["recall"]["recallPastCap"] == 0 and report["recall"]["noAnswerPastCap"] == 0
    rows = [json.loads(line) for line in Path(report["questionsFile"]).read_text().splitlines()]
    assert {r["conditions"]["omstream+recall"]["reply"] for r in rows} == {"pottery class"}
    assert report["modelCallsMade"]["answer omstream+recall"] == 12  # 1 recall + the last call, per question
    last = [m for name, m in PROMPTS if m[-1]["content"].startswith("Messages you read from the conversation:")]
    window = PROMPTS[0][1][:-1]  # condition omstream's first request: the window, then the question
    assert len(last) == 6 and all(m[:-1] == window for m in last)  # the window alone: no guide
    assert all("Session 2 turn 1: I keep thinking about" in m[-1]["content"] for m in last)  # what was read

    code, report = run(data, tmp_path / "two", "recaller/always")
    assert code == 0 and report is not None
    assert report["recall"]["calls"] == 12 and report["modelCallsMade"]["answer omstream+recall"] == 18


def test_a_reader_that_does_not_recall_answers_in_one_call(data, tmp_path):
    code, report = run(data, tmp_path, "recaller/never")
    assert code == 0 and report is not None
    assert report["recall"]["calls"] == 0 and report["recall"]["questionsUsingRecall"] == 0
    assert report["f1"]["omstream+recall"] == report["f1"]["omstream"]


def test_a_run_stopped_between_recall_calls_resumes_without_asking_twice(data, tmp_path, capsys):
    code, whole = run(data, tmp_path / "whole", "recaller/once")
    assert code == 0 and whole is not None
    total = len(PROMPTS)
    PROMPTS.clear()
    runs = 0
    while True:
        code, report = run(data, tmp_path / "stopped", "recaller/once", "--stop-after-calls", "3")
        runs += 1
        if code == 0:
            break
        assert code == 3 and runs < 40
    print(f"stopped every 3 calls: {runs} runs, {len(PROMPTS)} reader calls (uninterrupted {total})")
    assert len(PROMPTS) == total  # no reader call made twice, a question cut between its calls included
    assert report is not None and report["f1"] == whole["f1"] and report["recall"] == whole["recall"]
    PROMPTS.clear()
    code, again = run(data, tmp_path / "stopped", "recaller/once")
    assert code == 0 and again is not None and PROMPTS == []
    assert again["checkpoints"]["answersFromCheckpoint"] == {"omstream": 6, "recent": 6, "omstream+recall": 6}


def test_the_guide_reads_each_session_from_the_end_of_the_one_before():
    from bench import locomo

    conversation = locomo.conversation_of(_conversation()[0])
    lines = quality_recall.session_index(conversation, "t").splitlines()
    assert lines[0].startswith("RECALL: start   (session 1, ") and lines[1].startswith("RECALL: t:1:12   (session 2")
    assert [quality_recall.parse_recall(x.split("   (")[0]) for x in lines[:2]] == [
        {"mode": "messages", "anchor": "start"}, {"mode": "messages", "cursor": "t:1:12"}]


def test_a_last_reply_loses_its_recall_lines():
    assert quality_recall.final("RECALL: t:1:2\nMelanie painted it in 2022.") == "Melanie painted it in 2022."
    assert quality_recall.final("RECALL: t:1:2") == "RECALL: t:1:2"
    assert quality_recall.final("2022") == "2022"


def test_the_recall_condition_is_opt_in():
    assert "omstream+recall" not in quality.parse_args([]).conditions.split(",")
    assert quality.parse_conditions("omstream,omstream+recall") == ["omstream", "omstream+recall"]
    with pytest.raises(SystemExit, match="unknown condition"):
        quality.parse_conditions("omstream+search")


@pytest.mark.parametrize(("reply", "params"), [
    ("RECALL: t:1:2", {"mode": "messages", "cursor": "t:1:2"}),
    ("  recall: `t:3:4`\nmore", {"mode": "messages", "cursor": "t:3:4"}),
    ('**RECALL**: {"cursor": "t:1:2", "page": -1}', {"cursor": "t:1:2", "page": -1}),
    ("RECALL: {not json", {"_unparsed": "{not json"}),
    ("RECALL: Start", {"mode": "messages", "anchor": "start"}),
    ("RECALL: t:1:12   (session 2, 7:40 pm on 15 April, 2024)", {"mode": "messages", "cursor": "t:1:12"}),
    ("Pottery. RECALL: t:1:1", None),
    ("", None),
])
def test_recall_lines(reply, params):
    assert quality_recall.parse_recall(reply) == params


def test_export_writes_the_runs_observer_answers_in_the_corpus_format(data, tmp_path, capsys):
    assert run(data, tmp_path, "recaller/never")[0] == 0
    out = tmp_path / "corpus"
    args = ["--data", str(data), "--questions", "6", "--message-tokens", "500", "--observation-tokens", "800",
            "--checkpoints", str(tmp_path / "checkpoints"), *SCRIPTED, "--export-corpus", str(out)]
    assert quality.main(args) == 0
    files = sorted(out.glob("*.json"))
    report = json.loads((tmp_path / "report.json").read_text())
    assert len(files) == report["observerCalls"] + report["reflectorCalls"]
    first = json.loads(files[0].read_text())
    assert files[0].name.startswith("lq-conv0-") and first["prompt_version"] == "lq"
    assert first["kind"] in ("observe", "reflect") and first["model"] == "scripted/observer"
    assert first["system_prompt"] and first["user_message"] and first["raw_output"].startswith("<observations>")
    assert first["parsed_at_export"]["outcome"] == "clean"
    # LoCoMo's text (CC BY-NC) is left out of the prompt; the model's own words stay.
    assert "Session 1 turn" not in first["user_message"] and "lines of LoCoMo messages, not copied" in first[
        "user_message"]
    assert first["source"]["messagesLeftOut"] >= 12
    later = json.loads(files[1].read_text())
    assert later["user_message"].startswith("## Previous Observations\n\n") and "Session" in later["user_message"]
    # Again: nothing new to write; no model is called.
    assert quality.main(args) == 0
    assert "0 fixtures written" in capsys.readouterr().out
    # The prompts are kept in the call checkpoint: other arguments (another fold) export the same.
    other = tmp_path / "other"
    assert quality.main([*args[:-1], str(other), "--message-tokens", "900"]) == 0
    assert sorted(p.name for p in other.glob("*.json")) == [p.name for p in files]
    assert "0 found by folding the conversation again, 0 whose prompt is unknown" in capsys.readouterr().out

    # A checkpoint written before prompts were kept: the export folds the conversation again.
    for calls in (tmp_path / "checkpoints" / "conv0").glob("calls-*.jsonl"):
        rows = [json.loads(line) for line in calls.read_text().splitlines()]
        calls.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "request"}) + "\n" for r in rows))
    old = tmp_path / "old"
    assert quality.main([*args[:-1], str(old)]) == 0
    assert [json.loads(p.read_text()) for p in sorted(old.glob("*.json"))] == [json.loads(p.read_text()) for p in files]
    assert f"0 with their prompt, {len(files)} found by folding" in capsys.readouterr().out
    # ... which another fold (another configuration) cannot do.
    assert quality.main([*args[:-1], str(tmp_path / "none"), "--message-tokens", "900"]) == 0
    assert "whose prompt is unknown" in capsys.readouterr().out
