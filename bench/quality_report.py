"""`bench.quality`'s report: F1 tables, the per-question inspection file, the worst regressions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import locomo
from .locomo import QA, Conversation
from .quality_inspect import Evidence, answer_in, content_words, landing, observation_lines, recent_split

__all__ = ["format_regressions", "format_split", "format_table", "observer_grammar", "question_rows",
           "split_summary", "summarise", "write_questions"]

SPLITS = ("inside", "outside", "unknown")


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def observer_grammar(calls: Sequence[dict[str, Any]]) -> bool | None:
    """Whether the run's Observer calls were made under the answer's grammar (a local model's
    are, `omstream.engine.prompting.answer_grammar`): True for all, False for none, None when it cannot be
    said (no Observer call, a mix, or calls checkpointed before the rows said so).  The parse
    shares `clean`/`recovered`/`failed` are then read as the grammar's or the lenient parser's."""
    marks = {row.get("grammar") for row in calls if row.get("kind") in ("observe", "buffer")}
    return marks.pop() if len(marks) == 1 and marks <= {True, False} else None


def summarise(questions: Sequence[QA], answers: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Mean score per condition: per category (`"1"`..`"5"`) and `"overall"`, with counts."""
    out: dict[str, dict[str, Any]] = {}
    for name, rows in answers.items():
        by_cat: dict[int, list[float]] = {}
        for qa, row in zip(questions, rows):
            by_cat.setdefault(qa.category, []).append(row["score"])
        out[name] = {str(c): round(sum(v) / len(v), 4) for c, v in sorted(by_cat.items())}
        out[name]["overall"] = _mean([row["score"] for row in rows])
    return out


def format_table(summary: dict[str, dict[str, Any]], counts: dict[int, int],
                 context_tokens: dict[str, int]) -> str:
    cats = sorted(counts)
    head = ["condition", *(f"{c} {locomo.CATEGORY_NAMES[c]} (n={counts[c]})" for c in cats),
            f"overall (n={sum(counts.values())})", "context tokens"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    for name, row in summary.items():
        cells = [name, *(f"{row.get(str(c), 0):.3f}" for c in cats),
                 f"{row['overall']:.3f}" if row["overall"] is not None else "-", str(context_tokens[name])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def question_rows(conversation: Conversation, thread: str, questions: Sequence[QA],
                  options: dict[int, dict[str, str] | None], answers: dict[str, list[dict[str, Any]]],
                  contexts: dict[str, list[dict[str, Any]]], context_tokens: dict[str, int],
                  observations: str, raw_ids: Sequence[str], recent_turns: int | None) -> list[dict[str, Any]]:
    """One inspection row per question: the question, gold answer, evidence, where the evidence
    landed in omstream's memory, the `recent` split, and per condition the context's tokens, the
    reply, the prediction scored, the F1 and how much of the gold answer the context holds."""
    evidence = Evidence(conversation, thread)
    lines = observation_lines(observations)
    line_words = [content_words(x["text"], evidence.names) for x in lines]
    texts = {name: "\n".join(str(m.get("content") or "") for m in chat) for name, chat in contexts.items()}
    raw = set(raw_ids)
    out = []
    for i, qa in enumerate(questions):
        conditions: dict[str, dict[str, Any]] = {}
        for name, rows in answers.items():
            row = rows[i]
            conditions[name] = {"contextTokens": context_tokens[name], "reply": row["reply"],
                                "prediction": row["prediction"], "score": round(row["score"], 4),
                                "answerInContext": answer_in(qa, texts[name]),
                                **{k: row[k] for k in ("promptTokens", "completionTokens", "seconds", "error",
                                                           "raw", "readerCalls", "recallCalls", "recalls")
                                   if k in row}}
        out.append({"index": qa.index, "category": qa.category, "question": qa.question, "answer": qa.answer,
                    "evidence": list(qa.evidence), "options": options[qa.index],
                    "recentWindow": recent_split(qa, conversation, recent_turns) if recent_turns is not None else None,
                    "landing": landing(qa, evidence, lines, raw, line_words) if "omstream" in answers else None,
                    "conditions": conditions})
    return out


def split_summary(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """F1 per condition on the questions whose evidence is inside / outside the recent window."""
    out: dict[str, dict[str, Any]] = {}
    for split in SPLITS:
        chosen = [r for r in rows if r["recentWindow"] == split]
        if not chosen:
            continue
        out[split] = {"n": len(chosen), **{name: _mean([r["conditions"][name]["score"] for r in chosen])
                                          for name in chosen[0]["conditions"]}}
    return out


def format_split(split: dict[str, dict[str, Any]]) -> str:
    if not split:
        return "(no recent window: the `recent` condition was not run)"
    names = [k for k in next(iter(split.values())) if k != "n"]
    lines = ["| evidence vs recent window | n | " + " | ".join(names) + " |",
             "|" + "|".join(" --- " for _ in range(len(names) + 2)) + "|"]
    for key, row in split.items():
        lines.append(f"| {key} | {row['n']} | " + " | ".join(
            f"{row[n]:.3f}" if row[n] is not None else "-" for n in names) + " |")
    return "\n".join(lines)


def _where(row: dict[str, Any]) -> str:
    parts = []
    for land in row.get("landing") or ():
        if land["where"] == "observations":
            parts.append(f"{land['evidence']} -> lines " + ",".join(str(x["line"]) for x in land["lines"]))
        else:
            parts.append(f"{land['evidence']} -> {land['where']}")
    return "; ".join(parts) or "no evidence ids"


def format_regressions(worst: Sequence[dict[str, Any]]) -> str:
    if not worst:
        return "no question where omstream scored below recent"
    lines = []
    for r in worst:
        om, recent = r["conditions"]["omstream"], r["conditions"]["recent"]
        lines.append(f"#{r['index']} (cat {r['category']}, {r['recentWindow']}) {r['question']}\n"
                     f"    gold {r['answer']!r}; omstream {om['prediction']!r} F1 {om['score']:.2f} "
                     f"(answer words in window {om['answerInContext']}); recent {recent['prediction']!r} "
                     f"F1 {recent['score']:.2f}\n    evidence: {_where(r)}")
    return "\n".join(lines)


def write_questions(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
