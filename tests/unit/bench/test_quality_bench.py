"""bench.quality (its modules) / bench.locomo without a model: scoring rules, sampling, dates, the recent-turns
budget and loading.  Every conversation here is synthetic, written for these tests in LoCoMo's
JSON shape (the real data set is CC BY-NC and never enters the repository)."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime

import pytest

from bench import locomo, quality_answer, quality_ingest, quality_report
from bench.locomo import QA


def qa(category: int, answer: str = "x", index: int = 0, evidence: tuple[str, ...] = ("D1:1",)) -> QA:
    return QA(index=index, question="q?", answer=answer, category=category, evidence=evidence)


SYNTHETIC = [{
    "sample_id": "synthetic-1",
    "conversation": {
        "speaker_a": "Ada", "speaker_b": "Bo",
        "session_1_date_time": "9:05 am on 2 March, 2024",
        "session_1": [
            {"speaker": "Ada", "dia_id": "D1:1", "text": "I adopted a cat called Pixel yesterday."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely! Look at my garden.",
             "img_url": ["http://example.invalid/x.jpg"], "blip_caption": "a photo of tulips in a garden"},
            {"speaker": "Ada", "dia_id": "D1:3", "text": "Those tulips are great."},
        ],
        "session_2_date_time": "7:40 pm on 15 Apr, 2024",
        "session_2": [
            {"speaker": "Bo", "dia_id": "D2:1", "text": "I ran a marathon in Oslo last weekend."},
            {"speaker": "Ada", "dia_id": "D2:2", "text": "Congratulations, Bo!"},
        ],
        "session_3_date_time": "12:10 am on 1 May, 2024",
        "session_3": [],
    },
    "qa": [
        {"question": "What is Ada's cat called?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
        {"question": "When did Bo run a marathon?", "answer": "The weekend before 15 April 2024",
         "evidence": ["D2:1"], "category": 2},
        {"question": "What pets and flowers are mentioned?", "answer": "cat, tulips",
         "evidence": ["D1:1", "D1:2"], "category": 1},
        {"question": "Would Ada like dogs?", "answer": 2024, "evidence": ["D1:1"], "category": 3},
        {"question": "What is Bo's cat called?", "adversarial_answer": "Pixel", "evidence": ["D1:1"],
         "category": 5},
        {"question": "Where did Ada run?", "adversarial_answer": "Oslo", "evidence": ["D:2:1"], "category": 5},
    ],
    "event_summary": {}, "observation": {}, "session_summary": {},
}]


@pytest.fixture
def synthetic(tmp_path):
    path = tmp_path / "locomo-synthetic.json"
    path.write_text(json.dumps(SYNTHETIC), encoding="utf-8")
    return path


# --- scoring ----------------------------------------------------------------------------------------
def test_normalisation_drops_case_punctuation_commas_and_articles_including_and():
    assert locomo.normalize_answer("The Cat, and a Dog!") == "cat dog"
    assert locomo.normalize_answer("  an  apple. ") == "apple"


def test_porter_stems_as_nltk_does():
    expected = {"running": "run", "ponies": "poni", "caresses": "caress", "hopping": "hop",
                "falling": "fall", "relational": "relat", "happy": "happi", "generously": "gener",
                "dying": "die", "ties": "tie", "agreed": "agre", "painted": "paint", "is": "is",
                "sky": "sky", "controlling": "control", "adoption": "adopt", "feed": "feed"}
    assert {w: locomo.stem(w) for w in expected} == expected


def test_f1_is_token_f1_over_stemmed_tokens():
    assert locomo.f1_score("Pixel", "pixel") == 1.0
    assert locomo.f1_score("painting sunsets", "painted sunset") == 1.0  # stems agree
    assert locomo.f1_score("a red car", "blue car") == pytest.approx(0.5)  # 1 of 2 vs 1 of 2
    assert locomo.f1_score("", "anything") == 0.0
    assert locomo.f1_score("the", "the") == 0.0  # nothing left after normalisation


def test_category_1_averages_the_best_match_per_answer_part():
    # Answer parts "cat" and "tulips": "cat" found, "tulips" not.
    assert locomo.score("a cat, roses", qa(1, "cat, tulips")) == pytest.approx(0.5)
    assert locomo.score("tulips, cat", qa(1, "cat, tulips")) == 1.0
    # Without a comma the whole prediction is one part.
    assert locomo.score("cat and tulips", qa(1, "cat, tulips")) == pytest.approx((2 / 3 + 2 / 3) / 2)


def test_category_3_scores_against_the_answer_before_the_semicolon():
    assert locomo.score("likely yes", qa(3, "Likely yes; she loves animals")) == 1.0
    assert locomo.score("she loves animals", qa(3, "Likely yes; she loves animals")) == 0.0


def test_categories_2_and_4_use_plain_f1():
    assert locomo.score("7 May 2023", qa(2, "7 May 2023")) == 1.0
    assert locomo.score("may 2023", qa(2, "7 May 2023")) == pytest.approx(0.8)
    assert locomo.score("Pixel", qa(4, "Pixel")) == 1.0


def test_category_5_counts_a_prediction_that_says_it_is_not_available():
    assert locomo.score("No information available", qa(5, "Pixel")) == 1.0
    assert locomo.score("that is not mentioned in the conversation", qa(5, "Pixel")) == 1.0
    assert locomo.score("pixel", qa(5, "Pixel")) == 0.0
    with pytest.raises(ValueError):
        locomo.score("x", qa(6))


def test_category_5_prompt_and_reply_mapping():
    question = qa(5, "Pixel")
    orders = {tuple(locomo.choice_prompt(question, random.Random(s))[1].values()) for s in range(20)}
    assert orders == {("No information available", "Pixel"), ("Pixel", "No information available")}
    options = {"a": "Pixel", "b": "No information available"}
    prompt = locomo.question_prompt(question, options)
    assert prompt.endswith("Question: q? (a) Pixel (b) No information available. "
                           "Select the correct answer by writing (a) or (b).")
    assert locomo.postprocess("(a) Pixel", options) == "Pixel"
    assert locomo.postprocess("The answer is (b).\nmore", options) == "No information available"
    assert locomo.postprocess("I think b", options) == "No information available"  # LoCoMo: not (a) -> b


def test_prompts_and_postprocessing_of_ordinary_questions():
    assert locomo.question_prompt(qa(2)).endswith(
        "Question: q? Use DATE of CONVERSATION to answer with an approximate date.")
    assert locomo.question_prompt(qa(4)).startswith("Based on the above conversations")
    assert locomo.postprocess("\n  Answer: Pixel the cat\nsecond line") == "pixel the cat"


# --- sampling ---------------------------------------------------------------------------------------
def _pool(counts: dict[int, int]) -> list[QA]:
    out, i = [], 0
    for category, n in counts.items():
        for _ in range(n):
            out.append(qa(category, index=i))
            i += 1
    return out


def test_allocation_is_proportional_with_a_minimum_per_category():
    counts = {1: 32, 2: 37, 3: 13, 4: 70, 5: 47}
    alloc = locomo.allocate(counts, 40)
    assert sum(alloc.values()) == 40 and min(alloc.values()) >= 3
    assert alloc[4] == max(alloc.values()) and alloc[3] == 3
    assert alloc == {1: 6, 2: 7, 3: 3, 4: 14, 5: 10}
    # A category with fewer questions than the minimum gives all it has.
    assert locomo.allocate({1: 2, 4: 50}, 10) == {1: 2, 4: 8}
    # Fewer questions asked than categories x minimum: spread, largest categories first.
    assert locomo.allocate({1: 5, 2: 9, 3: 1, 4: 9, 5: 5}, 4) == {1: 1, 2: 1, 3: 0, 4: 1, 5: 1}
    # More asked than there are: all of them.
    assert locomo.allocate({1: 2, 2: 3}, 40) == {1: 2, 2: 3}


def test_stratified_sample_is_deterministic_and_stratified():
    pool = _pool({1: 32, 2: 37, 3: 13, 4: 70, 5: 47})
    first = locomo.stratified_sample(pool, 40, seed=7)
    assert [q.index for q in first] == [q.index for q in locomo.stratified_sample(pool, 40, seed=7)]
    assert [q.index for q in first] != [q.index for q in locomo.stratified_sample(pool, 40, seed=8)]
    assert Counter(q.category for q in first) == {1: 6, 2: 7, 3: 3, 4: 14, 5: 10}
    assert len({q.index for q in first}) == 40
    # Category order, then the file's order.
    assert [(q.category, q.index) for q in first] == sorted((q.category, q.index) for q in first)


# --- dates, evidence, loading -------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
    ("12:09 am on 13 September, 2023", datetime(2023, 9, 13, 0, 9, tzinfo=UTC)),
    ("12:30 pm on 1 January, 2024", datetime(2024, 1, 1, 12, 30, tzinfo=UTC)),
    ("10:37 am on 27 June, 2023", datetime(2023, 6, 27, 10, 37, tzinfo=UTC)),
    ("7:40 PM on 15 Apr 2024", datetime(2024, 4, 15, 19, 40, tzinfo=UTC)),
])
def test_session_dates(text, expected):
    assert locomo.parse_session_date(text) == expected


@pytest.mark.parametrize("text", ["8 May 2023", "1:56 pm on 8 Mai, 2023", "25:00 pm on 8 May, 2023"])
def test_bad_session_dates_are_refused(text):
    with pytest.raises(ValueError):
        locomo.parse_session_date(text)


def test_evidence_sessions_tolerate_the_files_typos():
    assert locomo.evidence_sessions(["D1:3", "D12:1"]) == {1, 12}
    assert locomo.evidence_sessions(["D:11:26", "D8:6; D9:17", "D"]) == {11, 8, 9}


def test_loading_a_locomo_shaped_file(synthetic):
    [conv] = locomo.load(synthetic)
    assert (conv.sample_id, conv.speaker_a, conv.speaker_b) == ("synthetic-1", "Ada", "Bo")
    assert [s.number for s in conv.sessions] == [1, 2]  # an empty session is left out
    assert conv.sessions[1].at == datetime(2024, 4, 15, 19, 40, tzinfo=UTC)
    assert conv.sessions[0].turns[1].content() == "Lovely! Look at my garden. [shares a photo: a photo of tulips in a garden]"
    answers = {q.question: q.answer for q in conv.qa}
    assert answers["What is Bo's cat called?"] == "Pixel"  # adversarial_answer
    assert answers["Would Ada like dogs?"] == "2024"  # numbers become text
    assert [q.category for q in conv.qa] == [4, 2, 1, 3, 5, 5]


def test_max_sessions_keeps_only_questions_answerable_from_them(synthetic):
    [conv] = locomo.load(synthetic)
    first = locomo.truncated(conv, 1)
    assert len(first.sessions) == 1
    assert [q.question for q in first.qa] == [
        "What is Ada's cat called?", "What pets and flowers are mentioned?", "Would Ada like dogs?",
        "What is Bo's cat called?"]
    assert locomo.truncated(conv, None) is conv and locomo.truncated(conv, 5) is conv


# --- ingestion input and contexts ----------------------------------------------------------------------
def test_messages_are_user_turns_with_speaker_names_a_minute_apart(synthetic):
    [conv] = locomo.load(synthetic)
    messages = quality_ingest.messages_of(conv, "t")
    assert [m.role for m in messages] == ["user"] * 5
    assert messages[0].content == "Ada: I adopted a cat called Pixel yesterday."
    assert messages[1].content.startswith("Bo: Lovely!") and "[shares a photo:" in messages[1].content
    assert [m.created_at.strftime("%m-%d %H:%M") for m in messages] == [
        "03-02 09:05", "03-02 09:06", "03-02 09:07", "04-15 19:40", "04-15 19:41"]
    assert len({m.id for m in messages}) == 5


def test_thresholds_scale_with_the_conversation():
    assert quality_ingest.thresholds([800] * 19) == (1600, 1300)
    assert quality_ingest.thresholds([100, 100]) == (500, 500)


def test_transcript_is_locomos_format(synthetic):
    [conv] = locomo.load(synthetic)
    text = quality_answer.render_transcript(conv, conv.turns())
    assert text.startswith("Below is a conversation between two people: Ada and Bo.")
    assert "\nDATE: 9:05 am on 2 March, 2024\nCONVERSATION:\nAda said, \"I adopted a cat" in text
    assert text.count("DATE:") == 2 and text.endswith('Ada said, "Congratulations, Bo!"\n')


def test_recent_turns_are_the_longest_suffix_within_the_budget(synthetic):
    from omstream.engine.rules.tokens import get_counter

    counter = get_counter("tiktoken")
    [conv] = locomo.load(synthetic)
    turns = conv.turns()
    sizes = [quality_answer.chat_tokens(quality_answer.transcript_chat(quality_answer.render_transcript(conv, turns[len(turns) - n:])),
                                 counter) for n in range(1, len(turns) + 1)]
    assert sizes == sorted(sizes)
    for n, size in enumerate(sizes, start=1):
        chat, kept = quality_answer.recent_within(conv, size, counter)
        assert kept == n and quality_answer.chat_tokens(chat, counter) == size
        if n > 1:
            assert quality_answer.recent_within(conv, size - 1, counter)[1] == n - 1
    chat, kept = quality_answer.recent_within(conv, sizes[1], counter)
    assert "Congratulations" in chat[0]["content"] and "Pixel" not in chat[0]["content"]
    assert "DATE: 7:40 pm on 15 Apr, 2024" in chat[0]["content"]
    assert quality_answer.recent_within(conv, 10_000, counter)[1] == len(turns)
    assert quality_answer.recent_within(conv, 1, counter)[1] == 0


def test_chat_tokens_adds_the_per_message_overhead():
    from omstream.engine.rules.tokens import get_counter

    counter = get_counter("tiktoken")
    chat = [{"role": "system", "content": "hello world"}, {"role": "user", "content": "hi"}]
    assert quality_answer.chat_tokens(chat, counter) == round(counter.count("hello world") + counter.count("hi") + 7.6)


def test_observer_outcomes():
    from types import SimpleNamespace

    def result(output, ok=True):
        return SimpleNamespace(ok=ok, output=output)

    assert quality_ingest.observer_outcome(result("<observations>\nDate: May 8, 2023\n* 🔴 (13:56) Ada adopted a cat\n"
                                           "</observations>")) == "clean"
    assert quality_ingest.observer_outcome(result("", ok=False)) == "failed"
    assert quality_ingest.observer_outcome(result("nothing to see")) == "failed"
    assert quality_ingest.observer_outcome(result(("* 🔴 (13:56) the very same looping line over and over\n") * 400)) == "failed"


def test_summary_and_table():
    questions = [qa(1, index=0), qa(1, index=1), qa(5, index=2)]
    answers = {"omstream": [{"score": 1.0}, {"score": 0.5}, {"score": 0.0}],
               "none": [{"score": 0.0}, {"score": 0.0}, {"score": 1.0}]}
    summary = quality_report.summarise(questions, answers)
    assert summary["omstream"] == {"1": 0.75, "5": 0.0, "overall": 0.5}
    table = quality_report.format_table(summary, {1: 2, 5: 1}, {"omstream": 900, "none": 0})
    assert "| omstream | 0.750 | 0.000 | 0.500 | 900 |" in table
    assert "1 multi-hop (n=2)" in table
