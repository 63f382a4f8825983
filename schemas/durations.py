"""Idle-activation times: parsing `activateAfterIdle` values (spec §2).

Config files hold these as data — `300000` (ms), `"5m"`, `"1hr"`, `"auto"` or `false` — and the
engine needs one number of milliseconds. Parsing lives here, apart from the option tree, because
the fold decides idle activation from event time (normative choice 12) and must read the same
value `om config check` printed. `'auto'` stays symbolic until the actor's model is known; the
engine then turns it into the provider's prompt-cache lifetime
(`omstream.engine.rules.activation.resolve_activation_ttl`, spec §15 item 5).
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

__all__ = [
    "AUTO",
    "DURATION_PATTERN",
    "IdleActivation",
    "parse_activate_after_idle",
    "parse_duration_ms",
]

AUTO: Literal["auto"] = "auto"

# The original's `parseActivationTTL` grammar, case-insensitive.
DURATION_PATTERN = re.compile(
    r"^(\d+(?:\.\d+)?)\s*(ms|msec|msecs|millisecond|milliseconds|s|sec|secs|second|seconds"
    r"|m|min|mins|minute|minutes|h|hr|hrs|hour|hours)$",
    re.IGNORECASE,
)

_SECOND = 1000
_MINUTE = 60 * _SECOND
_HOUR = 60 * _MINUTE
_UNIT_MS = {
    **dict.fromkeys(("ms", "msec", "msecs", "millisecond", "milliseconds"), 1),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), _SECOND),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), _MINUTE),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), _HOUR),
}

IdleActivation = int | float | Literal["auto"] | None
"""A resolved idle activation: milliseconds, `'auto'` (decided per actor model), or None (off)."""

_HINT = "use milliseconds (300000), a duration such as '5m', '90s' or '1hr', 'auto', or false"


def _tidy(ms: float) -> int | float:
    return int(ms) if float(ms).is_integer() else ms


def parse_duration_ms(text: str) -> int | float:
    """`"5m"` → 300000. Raises ValueError (with the accepted forms) for anything else."""
    match = DURATION_PATTERN.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration; {_HINT}")
    return _tidy(float(match.group(1)) * _UNIT_MS[match.group(2).lower()])


def parse_activate_after_idle(value: Any) -> IdleActivation:
    """An `activateAfterIdle` value → ms, `'auto'`, or None for `false`/unset.

    Negative numbers, NaN, infinities, `true` and unknown strings are refused.
    """
    if value is None or value is False:
        return None
    if value is True:
        raise ValueError(f"true is not an idle time; {_HINT}")
    if isinstance(value, (int, float)):
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise ValueError(f"{value} is not a usable idle time (it must be a finite number >= 0); {_HINT}")
        return _tidy(value)
    if isinstance(value, str):
        if value.strip().lower() == AUTO:
            return AUTO
        return parse_duration_ms(value)
    raise ValueError(f"{value!r} is not an idle time; {_HINT}")
