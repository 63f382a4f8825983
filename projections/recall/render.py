"""A page of parts as one text within the result budget (spec §12): each message headed
`**<role> (<time>)** [<id>]:`, each part `  [p<i>] <text>`.

At low detail the parts come shortened; what the budget leaves is spent making shortened parts
longer, the user's own words first (up to 200 tokens), then other text and reasoning, then tool
results, then tool calls (up to 50 tokens each).  Whatever still exceeds the budget is cut hard:
`truncated` is set and `tokenOffset` says how many tokens were left out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from omstream.engine.rules.tokens import Counter

from .parts import RecallPart, format_timestamp, part_hint, truncate_tokens

__all__ = ["MAX_RESULT_TOKENS", "Rendered", "render_parts", "rendered_text"]

#: Every recall answer's text fits this many tokens.
MAX_RESULT_TOKENS = 2000
_EXPAND_USER_TEXT, _EXPAND_OTHER = 200, 50


@dataclass(frozen=True)
class Rendered:
    text: str
    truncated: bool
    token_offset: int


def rendered_text(parts: list[RecallPart], times: dict[str, datetime]) -> str:
    lines: list[str] = []
    current = None
    for part in parts:
        if part.message_id != current:
            current = part.message_id
            at = times.get(part.message_id)
            if lines:
                lines.append("")
            lines.append(f"**{part.role}{f' ({format_timestamp(at)})' if at else ''}** [{part.message_id}]:")
        lines.append(f"  [p{part.part_index}] {part.text}")
    return "\n".join(lines)


def _priority(part: RecallPart) -> int:
    if part.role == "user" and part.type == "text":
        return 0
    if part.type in ("text", "reasoning"):
        return 1
    return {"tool-result": 2, "tool-call": 3}.get(part.type, 4)


def _expand_limit(part: RecallPart) -> int:
    return _EXPAND_USER_TEXT if part.role == "user" and part.type == "text" else _EXPAND_OTHER


def _hard_cut(text: str, budget: int, counter: Counter) -> Rendered:
    total = counter.count(text)
    if total <= budget:
        return Rendered(text, False, 0)
    cut, _ = truncate_tokens(text, budget, counter)
    return Rendered(cut, True, total - budget)


def render_parts(parts: list[RecallPart], times: dict[str, datetime], counter: Counter,
                 budget: int = MAX_RESULT_TOKENS) -> Rendered:
    """The parts as text within `budget`, shortened parts expanded with what it leaves."""
    text = rendered_text(parts, times)
    total = counter.count(text)
    if total > budget:
        return _hard_cut(text, budget, counter)
    shortened = sorted((i for i, p in enumerate(parts) if p.text != p.full_text),
                       key=lambda i: _priority(parts[i]))  # stable: page order within a priority
    if not shortened:
        return Rendered(text, False, 0)
    parts = list(parts)
    left = budget - total
    for i in shortened:
        if left <= 0:
            break
        part = parts[i]
        limit = _expand_limit(part)
        full, now = counter.count(part.full_text), counter.count(part.text)
        target = min(full, limit)
        if target - now <= 0:
            continue
        if target >= full and target - now <= left:
            parts[i] = replace(part, text=part.full_text)
            left -= target - now
            continue
        grown, _ = truncate_tokens(part.full_text, min(now + left, limit), counter,
                                   part_hint(part.message_id, part.part_index))
        parts[i] = replace(part, text=grown)
        left -= counter.count(grown) - now
    return _hard_cut(rendered_text(parts, times), budget, counter)
