"""What the Observer is shown of the previous observations (spec §6.11, normative choice 3).

The observer needs the recent log to avoid repeating itself and the important old lines
(🔴 facts, ✅ outcomes) to stay consistent; it does not need everything.  Within
`observation.previousObserverTokens` we keep a tail of recent lines plus as many of the newest
important lines before it as fit, and mark each hidden run of lines.  Among the candidates that
fit, more important lines win, then a longer tail.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from functools import lru_cache

from ..rules.reflection_plan import merge_buffered_reflection
from ..state import BufferedReflection

__all__ = ["TRUNCATION_NOTICE", "truncate_observations", "with_pending_reflection"]

TRUNCATION_NOTICE = (
    "Previous observations were truncated for context budget reasons.\n"
    "The main agent still has full memory context outside this observer window."
)


@lru_cache(maxsize=1 << 16)
def _line_cost(count: Callable[[str], int], line: str) -> int:
    """Lines outlive many observer calls, so each is counted once (a pure function of the line)."""
    return count(line)


def _marker(hidden: int) -> str:
    return f"[{hidden} observations truncated here]"


def _render(lines: Sequence[str], kept: set[int]) -> str:
    """Kept lines verbatim; a hidden run of two or more lines becomes one marker line."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])  # a marker would cost as much as the line it hides
        elif run:
            out.append(_marker(len(run)))
        run.clear()

    for i, line in enumerate(lines):
        if i in kept:
            flush()
            out.append(line)
        else:
            run.append(line)
    flush()
    return "\n".join(out)


def with_pending_reflection(observations: str, budget: int | None, pending: BufferedReflection | None) -> str:
    """The log the Observer's budget is applied to (§6.11): with a budget
    (`previousObserverTokens`) and a buffered reflection not activated yet, the reflection takes
    the place of the lines it covers, as the log will read once it activates, so the budget keeps
    more of what came after; otherwise the log itself (the same object).  Without a budget the
    Observer reads the log as it is."""
    if budget is None or pending is None:
        return observations
    return merge_buffered_reflection(observations, pending.text, pending.line_count)


def truncate_observations(text: str, budget: int | None, count: Callable[[str], int],
                          total: int | None = None) -> tuple[str, bool]:
    """`(text shown to the observer, whether anything was cut)`; `budget` None = unlimited.

    `total` is `count(text)` when the caller already knows it (the record keeps its count).
    """
    if budget is None or not text:
        return text, False
    if budget == 0:
        return "", True
    if (count(text) if total is None else total) <= budget:
        return text, False
    lines = text.split("\n")
    costs = [_line_cost(count, line) for line in lines]
    important = [i for i, line in enumerate(lines) if "🔴" in line or "✅" in line]
    suffix = [0] * (len(lines) + 1)
    for i in range(len(lines) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + costs[i]
    def with_markers(keep: list[int], start: int, content: int) -> int:
        """The content plus what the hidden runs cost: a marker, or the lone hidden line."""
        total, edges = content, [-1, *keep, start]
        for left, right in zip(edges, edges[1:]):
            hidden = right - left - 1
            total += _line_cost(count, _marker(hidden)) if hidden > 1 else costs[left + 1] if hidden else 0
        return total

    # Running costs of the important lines, so each tail start finds the newest important lines
    # that fit (the oldest go first) by bisection instead of by dropping them one at a time.
    important_costs = [0]
    for i in important:
        important_costs.append(important_costs[-1] + costs[i])
    candidates: list[tuple[int, int, tuple[int, ...]]] = []  # (important kept, tail start, kept)
    for start in range(1, len(lines)):
        if suffix[start] > budget:
            continue  # the tail alone does not fit
        end = bisect_left(important, start)
        first = max(0, end - (len(lines) - start))
        room = budget - suffix[start]
        first = bisect_left(important_costs, important_costs[end] - room, first, end)
        keep = important[first:end]
        cost = suffix[start] + important_costs[end] - important_costs[first]
        if with_markers(keep, start, cost) <= budget:
            candidates.append((len(keep), -start, tuple(keep)))
    # The exact count (newlines included) decides; try the preferred candidates first: more
    # important lines, then the longer tail.
    for _, negative_start, kept in sorted(candidates, reverse=True):
        candidate = _render(lines, {*kept, *range(-negative_start, len(lines))})
        if count(candidate) <= budget:
            return candidate, True
    return _marker(len(lines)), True
