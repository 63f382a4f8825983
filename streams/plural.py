"""`plural(n, "message")`: a count and its noun, agreeing ("1 message", "2 messages").

The one pluraliser of what `om` prints (the CLI, the demo, `om simulate`); the dashboard has its
twin, `om.plural` in `projections/static/common.js`.  Nouns whose plural is not the noun + "s"
are given theirs ("1 memory", "2 memories": `plural(n, "memory", "memories")`).
"""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`count` and `noun`, in the plural (`many`, else noun + "s") unless the count is one."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
