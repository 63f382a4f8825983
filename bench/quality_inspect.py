"""`bench.quality`'s inspection: where each question's evidence went in omstream's memory.

LoCoMo names each question's evidence by dialogue ids (`D3:12`: session 3, turn 12).  A turn
is ingested as the message `<thread>:3:12`; after ingestion it is either still raw in the
window (unobserved: the reader sees it verbatim) or observed, and then its content survives,
if at all, in some lines of the observation log.  Which lines is not recorded by the engine
(an Observer call reads many messages and writes many lines), so the bench matches by words,
and says so.  The rule (`landing`):

* content words: lower-cased, punctuation dropped, Porter-stemmed (LoCoMo's own normalisation),
  without stop words and without the two speakers' names (every line names one of them);
* an observation line *holds* an evidence turn when they share at least 2 content words and
  the shared words are at least 30 % of the line's content words, i.e. a good part of the
  line is made of that turn's words.  Up to 3 such lines per turn are listed, most shared
  first.  A paraphrase with other words is missed and a line about the same topic from
  another turn can be counted: it is a pointer for a person reading the file, not a score.
* `answerInContext`: the share of the gold answer's content words found anywhere in a
  condition's context (no rule about lines), so that "the memory lost it" can be told from
  "the reader did not use it".

The split the issue asks for: a question's evidence is *inside* the `recent` window when all
its evidence turns are among the recent turns, *outside* when any is not (then `recent` cannot
have all of it), *unknown* when it names no parseable evidence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .locomo import QA, Conversation, normalize_answer, stem

__all__ = ["Evidence", "answer_in", "content_words", "evidence_ids", "landing", "observation_lines", "recent_split",
           "worst_regressions"]

_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
_STOP = frozenset(
    "i me my we our you your he him his she her it its they them their this that these those is are was "
    "were be been being have has had do does did so but if or because as of at by for with about to from "
    "in on up out just not no yes very too can will would could should there here what when where who how "
    "all any some more most other than then also really oh wow yeah hey hi thanks thank much one like "
    "get got go going went im its thats dont ive youre".split())
MIN_SHARED = 2
MIN_LINE_SHARE = 0.3
MAX_LINES = 3


def content_words(text: str, ignore: frozenset[str] = frozenset()) -> set[str]:
    words = normalize_answer(text).split()
    return {stem(w) for w in words if w not in _STOP and w not in ignore and len(w) > 1}


def evidence_ids(qa: QA) -> list[str]:
    """The question's evidence as `D<session>:<turn>` (tolerant of the file's typos)."""
    return [f"D{s}:{t}" for e in qa.evidence for s, t in _EVIDENCE_ID.findall(e)]


def observation_lines(observations: str) -> list[dict[str, Any]]:
    """The log's content lines, each with its number (1-based) and the `Date:` heading above it."""
    out: list[dict[str, Any]] = []
    date = None
    for number, line in enumerate(observations.splitlines(), start=1):
        text = line.strip()
        if not text or (text.startswith("<") and text.endswith(">")):
            continue
        if text.startswith("Date:"):
            date = text.removeprefix("Date:").strip()
            continue
        out.append({"line": number, "date": date, "text": text})
    return out


class Evidence:
    """A conversation's turns by dialogue id, with the message id each was ingested as."""

    def __init__(self, conversation: Conversation, thread: str) -> None:
        self.turns: dict[str, tuple[str, str]] = {}  # dia id -> (message id, text)
        for session in conversation.sessions:
            for i, turn in enumerate(session.turns):
                self.turns[turn.dia_id] = (f"{thread}:{session.number}:{i + 1}", turn.content())
        self.names = frozenset(content_words(f"{conversation.speaker_a} {conversation.speaker_b}"))


def landing(qa: QA, evidence: Evidence, lines: Sequence[dict[str, Any]], raw_ids: set[str],
            line_words: Sequence[set[str]] | None = None) -> list[dict[str, Any]]:
    """Per evidence turn of `qa`: `raw` (still a message in the window), or the observation
    lines that hold it (the rule above), or `none`; `missing` when the id is not in the
    conversation ingested."""
    words_of = line_words if line_words is not None else [content_words(x["text"], evidence.names) for x in lines]
    out: list[dict[str, Any]] = []
    for dia in evidence_ids(qa):
        if dia not in evidence.turns:
            out.append({"evidence": dia, "where": "missing"})
            continue
        message_id, text = evidence.turns[dia]
        if message_id in raw_ids:
            out.append({"evidence": dia, "where": "raw"})
            continue
        words = content_words(text, evidence.names)
        held = []
        for line, lw in zip(lines, words_of):
            shared = words & lw
            if len(shared) >= MIN_SHARED and len(shared) >= MIN_LINE_SHARE * len(lw):
                held.append((len(shared), line))
        held.sort(key=lambda pair: (-pair[0], pair[1]["line"]))
        out.append({"evidence": dia, "where": "observations" if held else "none",
                    "lines": [{**line, "shared": n} for n, line in held[:MAX_LINES]]})
    return out


def answer_in(qa: QA, context_text: str) -> float | None:
    """The share of the gold answer's content words present in a context (None when the
    answer has none, or for category 5, whose answer is one the conversation does not hold)."""
    if qa.category == 5:
        return None
    gold = content_words(qa.answer)
    if not gold:
        return None
    return round(len(gold & content_words(context_text)) / len(gold), 3)


def recent_split(qa: QA, conversation: Conversation, recent_turns: int) -> str:
    """`inside`, `outside` or `unknown` (see the module's note)."""
    ids = evidence_ids(qa)
    if not ids:
        return "unknown"
    turns = conversation.turns()
    recent = {turn.dia_id for _, turn in turns[len(turns) - recent_turns:]} if recent_turns else set()
    return "inside" if all(i in recent for i in ids) else "outside"


def worst_regressions(rows: Sequence[dict[str, Any]], n: int = 10) -> list[dict[str, Any]]:
    """The questions where omstream scored lowest against `recent` (only those it lost)."""
    lost = [r for r in rows if "omstream" in r["conditions"] and "recent" in r["conditions"]
            and r["conditions"]["omstream"]["score"] < r["conditions"]["recent"]["score"]]
    lost.sort(key=lambda r: (r["conditions"]["omstream"]["score"] - r["conditions"]["recent"]["score"], r["index"]))
    return lost[:n]
