"""bench.quality's inspection rules and checkpoint files, on hand-made inputs (no model)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from bench import quality_inspect as inspect
from bench import quality_report as report
from bench.locomo import QA, Conversation, Session, Turn
from bench.quality_store import CallLimit, StopRequested, Store, digest

AT = datetime(2024, 3, 2, 9, 5, tzinfo=UTC)
CONVERSATION = Conversation("s", "Ada", "Bo", (
    Session(1, "9:05 am on 2 March, 2024", AT, (
        Turn("Ada", "D1:1", "I adopted a cat called Pixel yesterday at the shelter."),
        Turn("Bo", "D1:2", "Lovely! I ran the Oslo marathon last weekend."),
    )),
    Session(2, "9:05 am on 9 March, 2024", AT, (
        Turn("Ada", "D2:1", "My sister Clara is visiting from Lisbon."),
        Turn("Bo", "D2:2", "Say hello to her!"),
    )),
))
OBSERVATIONS = """<observations>
Date: Mar 2, 2024
* 🔴 (09:05) Ada adopted a cat named Pixel from the shelter
* 🔴 (09:06) Bo ran a marathon
Date: Mar 9, 2024
* 🔴 (09:05) Ada talked about family
</observations>"""


def qa(evidence: tuple[str, ...], answer: str = "Pixel", category: int = 4) -> QA:
    return QA(index=0, question="q?", answer=answer, category=category, evidence=evidence)


def test_observation_lines_carry_their_number_and_date():
    lines = inspect.observation_lines(OBSERVATIONS)
    assert [(x["line"], x["date"]) for x in lines] == [(3, "Mar 2, 2024"), (4, "Mar 2, 2024"), (6, "Mar 9, 2024")]


def test_evidence_lands_in_the_lines_made_of_its_words_raw_or_nowhere():
    evidence = inspect.Evidence(CONVERSATION, "t")
    lines = inspect.observation_lines(OBSERVATIONS)
    # D1:1 shares adopt, cat, pixel, shelter with line 3 (4 of its 5 content words).
    [cat] = inspect.landing(qa(("D1:1",)), evidence, lines, raw_ids=set())
    assert cat["where"] == "observations" and [x["line"] for x in cat["lines"]] == [3]
    assert cat["lines"][0]["shared"] == 4
    # D1:2 shares "ran" and "marathon" with line 4: both of its content words.
    assert inspect.landing(qa(("D1:2",)), evidence, lines, set())[0]["lines"][0]["line"] == 4
    # D2:1 shares nothing but the speaker's name, which does not count.
    assert inspect.landing(qa(("D2:1",)), evidence, lines, set())[0] == {"evidence": "D2:1", "where": "none",
                                                                         "lines": []}
    # Still a message in the window: raw.  Not in the conversation: missing.  Typos tolerated.
    assert inspect.landing(qa(("D2:2",)), evidence, lines, {"t:2:2"})[0]["where"] == "raw"
    assert inspect.landing(qa(("D7:1",)), evidence, lines, set())[0]["where"] == "missing"
    assert [x["evidence"] for x in inspect.landing(qa(("D:1:1", "D1:2; D2:1")), evidence, lines, set())] == [
        "D1:1", "D1:2", "D2:1"]


def test_recent_split_and_answer_share():
    assert inspect.recent_split(qa(("D2:1",)), CONVERSATION, 2) == "inside"
    assert inspect.recent_split(qa(("D1:2", "D2:1")), CONVERSATION, 2) == "outside"
    assert inspect.recent_split(qa(("D1:2", "D2:1")), CONVERSATION, 3) == "inside"
    assert inspect.recent_split(qa(("D2:1",)), CONVERSATION, 0) == "outside"
    assert inspect.recent_split(qa(()), CONVERSATION, 2) == "unknown"
    assert inspect.answer_in(qa((), "Pixel the cat"), OBSERVATIONS) == 1.0
    assert inspect.answer_in(qa((), "Clara from Lisbon"), OBSERVATIONS) == 0.0
    assert inspect.answer_in(qa((), "Oslo marathon"), OBSERVATIONS) == 0.5
    assert inspect.answer_in(qa((), "Pixel", category=5), OBSERVATIONS) is None


def _row(index: int, om: float, recent: float, split: str) -> dict:
    return {"index": index, "recentWindow": split,
            "conditions": {"omstream": {"score": om}, "recent": {"score": recent}}}


def test_worst_regressions_and_the_split_table():
    rows = [_row(0, 1.0, 0.0, "outside"), _row(1, 0.0, 1.0, "inside"), _row(2, 0.2, 0.5, "outside"),
            _row(3, 0.5, 0.5, "inside")]
    assert [r["index"] for r in inspect.worst_regressions(rows)] == [1, 2]
    assert [r["index"] for r in inspect.worst_regressions(rows, n=1)] == [1]
    split = report.split_summary(rows)
    assert split == {"inside": {"n": 2, "omstream": 0.25, "recent": 0.75},
                     "outside": {"n": 2, "omstream": 0.6, "recent": 0.25}}
    assert "| outside | 2 | 0.600 | 0.250 |" in report.format_split(split)


def test_store_rows_survive_a_torn_last_line_and_keys_follow_content(tmp_path):
    store = Store(tmp_path / "conv0")
    store.append("answers-full", "k", {"key": "a", "reply": "x"})
    store.append("answers-full", "k", {"key": "b", "reply": "y"})
    with store.path("answers-full", "k", ".jsonl").open("a") as out:
        out.write('{"key": "c", "rep')  # a run killed mid-write
    assert sorted(store.rows("answers-full", "k")) == ["a", "b"]
    store.save("ingest", "k", {"ingested": {"x": 1}})
    assert store.load("ingest", "k") == {"ingested": {"x": 1}} and store.load("ingest", "other") is None
    assert json.loads(store.path("ingest", "k").read_text()) == {"ingested": {"x": 1}}
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1}) != digest({"a": 1, "b": 3})


def test_call_limit_stops_the_run_after_n_calls():
    limit = CallLimit(2)
    for _ in range(2):
        limit.before("ingest")
        limit.count("ingest")
    try:
        limit.before("answer full")
    except StopRequested as stop:
        assert "answer full" in str(stop)
    else:
        raise AssertionError("the third call was allowed")
    assert limit.made == {"ingest": 2}
