"""Numbers as options are written: real, finite, whole where a count is asked for."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["number", "tidy", "whole"]


def tidy(x: float) -> int | float:
    """Drop float noise (30000 * 0.2 = 6000.000000000001) and print whole numbers as ints."""
    r = round(x, 6)
    return int(r) if float(r).is_integer() else r


def number(value: Any, hint: str) -> int | float:
    """A real, finite number (a bool is not one, nor NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number; {hint}")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{value} is not a usable number; {hint}")
    return value


def whole(value: Any, hint: str, minimum: int) -> int:
    """A whole number >= `minimum` (1.0 counts as whole, 1.5 does not)."""
    checked = number(value, hint)
    if not float(checked).is_integer() or checked < minimum:
        kind = "a positive whole number" if minimum > 0 else "a whole number >= 0"
        raise ValueError(f"must be {kind}, got {value!r}; {hint}")
    return int(checked)
