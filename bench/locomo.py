"""LoCoMo (snap-research/locomo) for `bench.quality`: loading, sampling, prompting and scoring.

Nothing of the data set is in this repository (its licence is CC BY-NC): the file is read from
the path given at run time.  Its shape, as `locomo10.json` has it: a list of samples, each with

* `conversation`: `speaker_a`, `speaker_b`, and per session N `session_N_date_time`
  (`"1:56 pm on 8 May, 2023"`) and `session_N`, a list of turns `{speaker, dia_id, text}`
  (`dia_id` `"D<N>:<i>"`), some with `img_url` and `blip_caption` (a shared photo);
* `qa`: `{question, answer | adversarial_answer, evidence: ["D1:3", ...], category}` with
  category 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial (unanswerable).

Scoring follows LoCoMo's `task_eval/evaluation.py` (`eval_question_answering`), read from the
repository:

* `normalize_answer`: drop commas, lowercase, drop punctuation, drop the words
  a/an/the/**and**, collapse spaces; tokens are then Porter-stemmed (`f1_score`);
* categories 2, 3, 4: token F1 against the answer; category 3 uses the answer before `;`;
* category 1: prediction and answer split on commas, the mean over answer parts of the best
  F1 over prediction parts (`f1`);
* category 5: 1 if the prediction contains `no information available` or `not mentioned`
  (case-insensitive), else 0.

The original stems with NLTK's `PorterStemmer()` (its default NLTK_EXTENSIONS mode).  NLTK is not
a dependency of omstream, so `PorterStemmer` below is a re-implementation of that mode (same
rules, same irregular-word table); it was checked word for word against NLTK 3.10 on the
vocabulary of LoCoMo conversations 0-4 (answers, questions and dialogue: 4 600 words) and the
examples of Porter's paper.

The question prompts are LoCoMo's own (`task_eval/evaluate_llama2.py`, the open-model runner):
`QA_PROMPT`; category 2 questions get " Use DATE of CONVERSATION to answer with an approximate
date."; category 5 questions become a two-option choice, `(a)`/`(b)` between
"No information available" and the adversarial answer in a random (here: seeded) order, and the
reply is mapped back to the chosen option's text before scoring.  Replies are post-processed as
there: first non-empty line; for category 5 "(a)" in it picks option a, anything else option b;
otherwise lowercased with `(a)`, `(b)`, `a)`, `b)` and `answer:` removed.
"""

from __future__ import annotations

import json
import math
import random
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "CATEGORY_NAMES",
    "Conversation",
    "QA",
    "Session",
    "Turn",
    "choice_prompt",
    "evidence_sessions",
    "f1_multi",
    "f1_score",
    "load",
    "normalize_answer",
    "parse_session_date",
    "postprocess",
    "question_prompt",
    "score",
    "stem",
    "stratified_sample",
]

CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}

#: LoCoMo's QA prompt (evaluate_llama2.py), put after the shared context.
QA_PROMPT = ("Based on the above conversations, write a short answer for the following question in a "
             "few words. Do not write complete and lengthy sentences. Answer with exact words from the "
             "conversations whenever possible.\n\nQuestion: {}")
TEMPORAL_SUFFIX = " Use DATE of CONVERSATION to answer with an approximate date."
NO_INFORMATION = "No information available"
CHOICE_SUFFIX = " (a) {} (b) {}. Select the correct answer by writing (a) or (b)."


# --- the data -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Turn:
    speaker: str
    dia_id: str
    text: str
    caption: str | None = None  # blip_caption of a shared photo

    def content(self) -> str:
        """The turn's text, a shared photo as `[shares a photo: caption]` after it."""
        if not self.caption:
            return self.text
        photo = f"[shares a photo: {self.caption}]"
        return f"{self.text} {photo}" if self.text else photo


@dataclass(frozen=True)
class Session:
    number: int
    date_time: str  # as written in the file
    at: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class QA:
    index: int  # position in the sample's qa list
    question: str
    answer: str  # the adversarial answer for category 5
    category: int
    evidence: tuple[str, ...] = ()

    @property
    def sessions(self) -> set[int]:
        return evidence_sessions(self.evidence)


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    qa: tuple[QA, ...] = field(default=())

    def turns(self) -> list[tuple[Session, Turn]]:
        return [(s, t) for s in self.sessions for t in s.turns]


_DATE = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$",
                   re.IGNORECASE)
_MONTHS = {m: i for i, m in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"), start=1)}


def parse_session_date(text: str) -> datetime:
    """`"1:56 pm on 8 May, 2023"` -> 2023-05-08 13:56 UTC (LoCoMo gives no zone; UTC is used
    throughout the benchmark).  Month names may be abbreviated ("Sep")."""
    match = _DATE.match(text)
    if not match:
        raise ValueError(f"not a LoCoMo session date: {text!r}")
    hour, minute, half, day, month, year = match.groups()
    if not 1 <= int(hour) <= 12:
        raise ValueError(f"not a 12-hour time in {text!r}")
    name = month.lower()
    months = [n for m, n in _MONTHS.items() if m.startswith(name[:3])]
    if len(name) < 3 or len(months) != 1:
        raise ValueError(f"unknown month {month!r} in {text!r}")
    h = int(hour) % 12 + (12 if half.lower() == "p" else 0)
    return datetime(int(year), months[0], int(day), h, int(minute), tzinfo=UTC)


_EVIDENCE = re.compile(r"D:?(\d+):\d+")


def evidence_sessions(evidence: Iterable[str]) -> set[int]:
    """Session numbers named by evidence ids (`D3:12` -> 3; tolerant of the file's few typos
    such as `D:11:26` and `D8:6; D9:17`)."""
    return {int(n) for e in evidence for n in _EVIDENCE.findall(str(e))}


def _session_numbers(conversation: dict[str, Any]) -> list[int]:
    numbers = []
    for key, value in conversation.items():
        match = re.fullmatch(r"session_(\d+)", key)
        if match and isinstance(value, list) and value:
            numbers.append(int(match.group(1)))
    return sorted(numbers)


def conversation_of(sample: dict[str, Any]) -> Conversation:
    conv = sample["conversation"]
    sessions = []
    for n in _session_numbers(conv):
        date_time = conv[f"session_{n}_date_time"]
        turns = tuple(
            Turn(speaker=t["speaker"], dia_id=t.get("dia_id", f"D{n}:{i + 1}"), text=t.get("text") or "",
                 caption=t.get("blip_caption") or None)
            for i, t in enumerate(conv[f"session_{n}"]))
        sessions.append(Session(n, date_time, parse_session_date(date_time), turns))
    qa = tuple(
        QA(index=i, question=q["question"],
           answer=str(q["answer"] if q.get("answer") is not None else q.get("adversarial_answer", "")),
           category=int(q["category"]), evidence=tuple(str(e) for e in q.get("evidence") or ()))
        for i, q in enumerate(sample.get("qa") or ()))
    return Conversation(str(sample.get("sample_id", "")), conv["speaker_a"], conv["speaker_b"],
                        tuple(sessions), qa)


def load(path: Path) -> list[Conversation]:
    """Every sample of a LoCoMo file, in order."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of LoCoMo samples")
    return [conversation_of(sample) for sample in data]


def truncated(conversation: Conversation, max_sessions: int | None) -> Conversation:
    """The first `max_sessions` sessions, and only the questions all of whose evidence lies in
    them (a question without parseable evidence is dropped)."""
    if not max_sessions or max_sessions >= len(conversation.sessions):
        return conversation
    sessions = conversation.sessions[:max_sessions]
    kept = {s.number for s in sessions}
    qa = tuple(q for q in conversation.qa if q.sessions and q.sessions <= kept)
    return Conversation(conversation.sample_id, conversation.speaker_a, conversation.speaker_b, sessions, qa)


# --- sampling ---------------------------------------------------------------------------------------
def allocate(counts: dict[int, int], k: int, minimum: int = 3) -> dict[int, int]:
    """Questions per category: proportional to `counts` (largest remainder), at least
    `minimum` per category (or all it has), summing to min(k, total)."""
    total = sum(counts.values())
    k = min(k, total)
    if k <= 0:
        return {c: 0 for c in counts}
    cats = sorted(c for c in counts if counts[c] > 0)
    floor = {c: min(counts[c], minimum) for c in cats}
    if sum(floor.values()) >= k:  # too few to give each its minimum: spread one by one
        alloc = {c: 0 for c in cats}
        left = k
        while left:
            for c in sorted(cats, key=lambda c: (-counts[c], c)):
                if left and alloc[c] < counts[c]:
                    alloc[c] += 1
                    left -= 1
        return alloc
    quota = {c: k * counts[c] / total for c in cats}
    alloc = {c: max(floor[c], min(counts[c], math.floor(quota[c]))) for c in cats}
    # Too many (minimums pushed it over): take from the largest above their minimum.
    while sum(alloc.values()) > k:
        c = max((c for c in cats if alloc[c] > floor[c]), key=lambda c: (alloc[c] - quota[c], alloc[c], -c))
        alloc[c] -= 1
    # Too few: give to the largest remainders that still have questions.
    while sum(alloc.values()) < k:
        c = max((c for c in cats if alloc[c] < counts[c]), key=lambda c: (quota[c] - alloc[c], counts[c], -c))
        alloc[c] += 1
    return alloc


def stratified_sample(questions: Sequence[QA], k: int, seed: int, minimum: int = 3) -> list[QA]:
    """K questions stratified by category (`allocate`), each category's drawn with
    `random.Random(seed)`; returned in category order, then in the file's order."""
    by_cat: dict[int, list[QA]] = {}
    for q in questions:
        by_cat.setdefault(q.category, []).append(q)
    alloc = allocate({c: len(qs) for c, qs in by_cat.items()}, k, minimum)
    rng = random.Random(seed)
    picked: list[QA] = []
    for c in sorted(by_cat):
        chosen = rng.sample(by_cat[c], alloc.get(c, 0))
        picked += sorted(chosen, key=lambda q: q.index)
    return picked


# --- prompts ----------------------------------------------------------------------------------------
def choice_prompt(qa: QA, rng: random.Random) -> tuple[str, dict[str, str]]:
    """A category 5 question as LoCoMo asks it: two options in random order."""
    if rng.random() < 0.5:
        options = {"a": NO_INFORMATION, "b": qa.answer}
    else:
        options = {"a": qa.answer, "b": NO_INFORMATION}
    return qa.question + CHOICE_SUFFIX.format(options["a"], options["b"]), options


def question_prompt(qa: QA, options: dict[str, str] | None = None) -> str:
    """The last user message: LoCoMo's QA prompt with the category's question form."""
    if qa.category == 2:
        question = qa.question + TEMPORAL_SUFFIX
    elif qa.category == 5 and options is not None:
        question = qa.question + CHOICE_SUFFIX.format(options["a"], options["b"])
    else:
        question = qa.question
    return QA_PROMPT.format(question)


def postprocess(reply: str, options: dict[str, str] | None = None) -> str:
    """LoCoMo's post-processing of a reply: its first non-empty line; a category 5 reply is
    the text of the option it chose ("(a)" in it: a, else b)."""
    text = (reply or "").replace('\\"', "'").strip()
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    answer = lines[0] if lines else ""
    if options is not None:
        return options["a"] if "(a)" in answer.lower() else options["b"]
    answer = answer.lower()
    for junk in ("(a)", "(b)", "a)", "b)", "answer:"):
        answer = answer.replace(junk, "")
    return answer.strip()


# --- scoring ----------------------------------------------------------------------------------------
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def f1_score(prediction: str, truth: str) -> float:
    """Token F1 of Porter-stemmed normalised tokens (LoCoMo's `f1_score`)."""
    pred = [stem(w) for w in normalize_answer(prediction).split()]
    gold = [stem(w) for w in normalize_answer(truth).split()]
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1_multi(prediction: str, truth: str) -> float:
    """Category 1 (LoCoMo's `f1`): the mean over the answer's comma-separated parts of the best
    F1 against any comma-separated part of the prediction."""
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(truth).split(",")]
    return sum(max(f1_score(p, g) for p in preds) for g in golds) / len(golds)


def score(prediction: str, qa: QA) -> float:
    """LoCoMo's score of a (post-processed) prediction for a question, by category."""
    if qa.category == 5:
        low = prediction.lower()
        return 1.0 if "no information available" in low or "not mentioned" in low else 0.0
    if qa.category == 1:
        return f1_multi(prediction, qa.answer)
    answer = qa.answer.split(";")[0].strip() if qa.category == 3 else qa.answer
    if qa.category in (2, 3, 4):
        return f1_score(prediction, answer)
    raise ValueError(f"unknown LoCoMo category {qa.category}")


# --- NLTK's PorterStemmer (NLTK_EXTENSIONS mode), re-implemented ----------------------------------
_VOWELS = frozenset("aeiou")
_IRREGULAR = {
    "skies": "sky", "sky": "sky", "dying": "die", "lying": "lie", "tying": "tie", "news": "news",
    "innings": "inning", "inning": "inning", "outings": "outing", "outing": "outing",
    "cannings": "canning", "canning": "canning", "howe": "howe", "proceed": "proceed",
    "exceed": "exceed", "succeed": "succeed",
}


def _cons(word: str, i: int) -> bool:
    if word[i] in _VOWELS:
        return False
    if word[i] == "y":
        return True if i == 0 else not _cons(word, i - 1)
    return True


def _measure(stem_: str) -> int:
    return "".join("c" if _cons(stem_, i) else "v" for i in range(len(stem_))).count("vc")


def _has_vowel(stem_: str) -> bool:
    return any(not _cons(stem_, i) for i in range(len(stem_)))


def _double_cons(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _cons(word, len(word) - 1)


def _cvc(word: str) -> bool:
    return ((len(word) >= 3 and _cons(word, len(word) - 3) and not _cons(word, len(word) - 2)
             and _cons(word, len(word) - 1) and word[-1] not in "wxy")
            or (len(word) == 2 and not _cons(word, 0) and _cons(word, 1)))


def _rules(word: str, rules: list[tuple[str, str, Any]]) -> str:
    for suffix, replacement, condition in rules:
        if suffix == "*d" and _double_cons(word):
            stem_ = word[:-2]
            return stem_ + replacement if condition is None or condition(stem_) else word
        if word.endswith(suffix):
            stem_ = word[:len(word) - len(suffix)] if suffix else word
            return stem_ + replacement if condition is None or condition(stem_) else word
    return word


def _positive(stem_: str) -> bool:
    return _measure(stem_) > 0


def _step1a(word: str) -> str:
    if word.endswith("ies") and len(word) == 4:
        return word[:-3] + "ie"
    return _rules(word, [("sses", "ss", None), ("ies", "i", None), ("ss", "ss", None), ("s", "", None)])


def _step1b(word: str) -> str:
    if word.endswith("ied"):
        return word[:-3] + ("ie" if len(word) == 4 else "i")
    if word.endswith("eed"):
        stem_ = word[:-3]
        return stem_ + "ee" if _measure(stem_) > 0 else word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[:-len(suffix)]):
            inter = word[:-len(suffix)]
            break
    else:
        return word
    return _rules(inter, [
        ("at", "ate", None), ("bl", "ble", None), ("iz", "ize", None),
        ("*d", inter[-1], lambda s: inter[-1] not in "lsz"),
        ("", "e", lambda s: _measure(s) == 1 and _cvc(s)),
    ])


def _step1c(word: str) -> str:
    return _rules(word, [("y", "i", lambda s: len(s) > 1 and _cons(s, len(s) - 1))])


def _step2(word: str) -> str:
    if word.endswith("alli") and _positive(word[:-4]):
        return _step2(word[:-4] + "al")
    rules = [
        ("ational", "ate", _positive), ("tional", "tion", _positive), ("enci", "ence", _positive),
        ("anci", "ance", _positive), ("izer", "ize", _positive), ("bli", "ble", _positive),
        ("alli", "al", _positive), ("entli", "ent", _positive), ("eli", "e", _positive),
        ("ousli", "ous", _positive), ("ization", "ize", _positive), ("ation", "ate", _positive),
        ("ator", "ate", _positive), ("alism", "al", _positive), ("iveness", "ive", _positive),
        ("fulness", "ful", _positive), ("ousness", "ous", _positive), ("aliti", "al", _positive),
        ("iviti", "ive", _positive), ("biliti", "ble", _positive), ("fulli", "ful", _positive),
        ("logi", "log", lambda s: _positive(word[:-3])),
    ]
    return _rules(word, rules)


def _step3(word: str) -> str:
    return _rules(word, [
        ("icate", "ic", _positive), ("ative", "", _positive), ("alize", "al", _positive),
        ("iciti", "ic", _positive), ("ical", "ic", _positive), ("ful", "", _positive),
        ("ness", "", _positive),
    ])


def _step4(word: str) -> str:
    def gt1(s: str) -> bool:
        return _measure(s) > 1
    return _rules(word, [
        ("al", "", gt1), ("ance", "", gt1), ("ence", "", gt1), ("er", "", gt1), ("ic", "", gt1),
        ("able", "", gt1), ("ible", "", gt1), ("ant", "", gt1), ("ement", "", gt1), ("ment", "", gt1),
        ("ent", "", gt1), ("ion", "", lambda s: _measure(s) > 1 and s[-1] in "st"),
        ("ou", "", gt1), ("ism", "", gt1), ("ate", "", gt1), ("iti", "", gt1), ("ous", "", gt1),
        ("ive", "", gt1), ("ize", "", gt1),
    ])


def _step5a(word: str) -> str:
    if word.endswith("e"):
        stem_ = word[:-1]
        if _measure(stem_) > 1 or (_measure(stem_) == 1 and not _cvc(stem_)):
            return stem_
    return word


def _step5b(word: str) -> str:
    return _rules(word, [("ll", "l", lambda s: _measure(word[:-1]) > 1)])


def stem(word: str) -> str:
    """NLTK's `PorterStemmer().stem(word)` (NLTK_EXTENSIONS mode)."""
    lowered = word.lower()
    if lowered in _IRREGULAR:
        return _IRREGULAR[lowered]
    if len(word) <= 2:
        return lowered
    w = lowered
    for step in (_step1a, _step1b, _step1c, _step2, _step3, _step4, _step5a, _step5b):
        w = step(w)
    return w
