"""`python -m bench.quality --conversations 0-4`: one table over several conversations.

Each conversation runs as `--conversation N` would (its own checkpoints and report, so a stopped
run resumes conversation by conversation); this module combines their reports:

- **F1 per condition and category**, pooled over the questions of every conversation (a
  category's mean weighs each question once), and **overall as the mean of the conversations'
  overall F1** ("the mean of the five": each conversation counts once, however many questions of
  each category its sample drew);
- each conversation's overall F1 per condition, so one conversation cannot hide in the mean;
- the Observer's answers parsed clean / recovered / failed, summed, and whether a grammar
  constrained them (the report's `observerGrammar`, when it says);
- recall use (condition `omstream+recall`), summed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import locomo

__all__ = ["combine", "format_summary", "parse_conversations"]


def parse_conversations(text: str) -> list[int]:
    """`0-4`, `0,2,4` or `1`: the conversation indices, in order, each once."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"--conversations {text!r}: expected indices like 0-4 or 0,2,4") from None
        if first > last:
            raise ValueError(f"--conversations {text!r}: the range {part} runs backwards")
        out += [n for n in range(first, last + 1) if n not in out]
    if not out:
        raise ValueError("--conversations names no conversation")
    return out


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _summed(dicts: Sequence[dict[str, Any] | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for key, value in (d or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                out[key] = out.get(key, 0) + value
    return out


def combine(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several `bench.quality` reports as one summary (see the module's doc)."""
    conditions = list(dict.fromkeys(name for r in reports for name in r["f1"]))
    categories = sorted({int(c) for r in reports for c in r["questionsPerCategory"]})
    questions = {c: sum(r["questionsPerCategory"].get(str(c), 0) for r in reports) for c in categories}
    f1: dict[str, dict[str, float | None]] = {}
    for name in conditions:
        row: dict[str, float | None] = {}
        for c in categories:
            weighted = [(r["f1"][name][str(c)], r["questionsPerCategory"][str(c)]) for r in reports
                        if name in r["f1"] and str(c) in r["f1"][name]]
            total = sum(n for _, n in weighted)
            row[str(c)] = round(sum(v * n for v, n in weighted) / total, 4) if total else None
        overall = [r["f1"][name]["overall"] for r in reports
                   if name in r["f1"] and r["f1"][name].get("overall") is not None]
        row["overall"] = _mean(overall)
        f1[name] = row
    outputs = _summed([r.get("observerOutputs") for r in reports])
    total = sum(outputs.values())
    grammar = {r.get("observerGrammar") for r in reports} - {None}
    return {
        "conversations": [{"conversation": r["conversation"], "sampleId": r.get("sampleId"),
                           "fullConversation": r.get("fullConversation"),
                           "f1": {name: r["f1"][name]["overall"] for name in r["f1"]}} for r in reports],
        "questionsPerCategory": {str(c): n for c, n in questions.items()},
        "f1": f1,
        "observerOutputs": outputs,
        "observerOutputShares": {k: round(v / total, 3) for k, v in outputs.items()} if total else {},
        "observerGrammar": grammar.pop() if len(grammar) == 1 else (None if not grammar else "mixed"),
        "recall": _summed([r.get("recall") for r in reports]) or None,
    }


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as Markdown: the F1 table, then parse shares and recall use."""
    counts = summary["questionsPerCategory"]
    runs = summary["conversations"]
    head = ["condition", *(f"{c} {locomo.CATEGORY_NAMES[int(c)]} (n={n})" for c, n in counts.items()),
            f"mean of {len(runs)} conversations", *(f"conv {r['conversation']}" for r in runs)]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    for name, row in summary["f1"].items():
        cells = [name, *(_cell(row[c]) for c in counts), _cell(row["overall"]),
                 *(_cell(r["f1"].get(name)) for r in runs)]
        lines.append("| " + " | ".join(cells) + " |")
    shares = summary["observerOutputShares"]
    lines.append("")
    lines.append("Observer answers: " + ", ".join(
        f"{k} {v} ({shares.get(k, 0):.0%})" for k, v in summary["observerOutputs"].items())
        + (f"; grammar: {summary['observerGrammar']}" if summary.get("observerGrammar") is not None else ""))
    recall = summary.get("recall")
    if recall:
        lines.append(f"Recall: {recall.get('calls', 0)} calls, {recall.get('questionsUsingRecall', 0)} of "
                     f"{recall.get('questions', 0)} questions used it, cap reached {recall.get('capReached', 0)}, "
                     f"left without an answer {recall.get('noAnswerPastCap', 0)}")
    return "\n".join(lines)
