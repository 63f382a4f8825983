"""Reflection decisions: when to reflect, what to reflect, which answer to keep (spec §6.7, §6.8, §8.2, §8.3).

The Reflector rewrites the whole observation log into a shorter one.  Three decisions surround
each call, all pure:

* **whether** (`plan_reflection`, §6.7): start a background reflection of the oldest lines once
  the log reaches half the threshold (20 000 of 40 000 by default), swap it in at the
  threshold, and block on a synchronous reflection only at blockAfter (48 000) or when nothing
  was buffered.
* **what** (`buffered_reflection_slice`, `merge_buffered_reflection`, §6.8): a buffered
  reflection covers a count of leading lines; lines appended while it ran are kept verbatim.
* **which answer** (`ladder_step`, §8.3): ask again with stronger compression guidance until
  the result is under target; at the last level keep the smallest usable answer (normative
  choice 4).  With gemini-2.5-flash the ladder is levels 2, 3, 4; otherwise 1–4; manual 0–3.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .thresholds import (
    BUFFERED_REFLECTION_RATIO,
    reflection_activation_min_tokens,
    reflection_buffer_start,
    round_half_up,
)

__all__ = [
    "LadderStep",
    "ReflectionAction",
    "ReflectionAttempt",
    "ReflectionPlan",
    "ReflectionSlice",
    "ReflectionTrigger",
    "buffered_reflection_slice",
    "buffered_reflection_suppressed",
    "compression_levels",
    "compression_start_level",
    "is_retry_suppressed",
    "ladder_step",
    "max_compression_level",
    "merge_buffered_reflection",
    "plan_reflection",
    "retry_message",
    "suppression_after_commit",
    "suppression_after_failure",
]

ReflectionTrigger = Literal["threshold", "ttl", "provider_change"]
ReflectionAction = Literal["none", "buffer", "activate_buffered", "reflect"]

MAX_COMPRESSION_LEVEL = 4
# Most retries a ladder makes after its first attempt.
_LADDER_RETRIES = 3


# --- §6.7 whether ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReflectionPlan:
    """What `maybeReflect` does now.

    `action`:
      * `none` — nothing (below threshold, busy, or suppressed);
      * `buffer` — start a background reflection of the oldest lines (§6.8);
      * `activate_buffered` — swap the ready buffered reflection in; for a `ttl` or
        `provider_change` trigger first check `buffered_reflection_suppressed`, and if it is,
        do nothing;
      * `reflect` — a synchronous reflection of the whole log.
    """

    action: ReflectionAction
    triggered_by: ReflectionTrigger | None = None


def plan_reflection(
    observation_tokens: int,
    threshold: int,
    *,
    async_enabled: bool,
    buffer_activation: float = 0.5,
    block_after: float | None = None,
    has_buffered_reflection: bool = False,
    buffering_in_flight: bool = False,
    reflecting_in_flight: bool = False,
    ttl_expired: bool = False,
    provider_changed: bool = False,
    suppressed_at: int | None = None,
) -> ReflectionPlan:
    """`ReflectorRunner.maybeReflect` (spec §6.7) as a decision.

    `threshold` is the effective reflection threshold (thresholds.effective_reflection_threshold),
    `block_after` the resolved reflection blockAfter, `suppressed_at` the observation-token
    count at which a threshold-triggered reflection last failed to get under the threshold.

    The original waits up to 5 s for a buffered reflection that is still running; a fold cannot
    wait, so while one is in flight this answers `none` (or `reflect` at blockAfter) and the
    caller plans again when the buffered result arrives.
    """
    obs = observation_tokens
    buffer_start = reflection_buffer_start(threshold, buffer_activation)
    buffer_busy = buffering_in_flight or has_buffered_reflection or reflecting_in_flight
    early_buffer = async_enabled and obs < threshold and not buffer_busy and obs >= buffer_start
    if obs < threshold and not ttl_expired and not provider_changed:
        return ReflectionPlan("buffer" if early_buffer else "none")
    triggered_by: ReflectionTrigger = (
        "threshold" if obs >= threshold else "provider_change" if provider_changed else "ttl"
    )
    if reflecting_in_flight:
        return ReflectionPlan("none", triggered_by)
    if async_enabled:
        if has_buffered_reflection:
            return ReflectionPlan("activate_buffered", triggered_by)
        if not (block_after is not None and obs >= block_after):
            if obs < buffer_start or buffering_in_flight:
                return ReflectionPlan("none", triggered_by)
            return ReflectionPlan("buffer", triggered_by)
    if is_retry_suppressed(triggered_by, suppressed_at, obs):
        return ReflectionPlan("none", triggered_by)
    return ReflectionPlan("reflect", triggered_by)


def suppression_after_commit(committed_tokens: int, threshold: int) -> int | None:
    """After a sync reflection: remember its size if it is still over the threshold, so the
    next threshold check does not immediately reflect the same log again (§6.7, §15 item 8)."""
    return committed_tokens if committed_tokens >= threshold else None


def suppression_after_failure(observation_tokens: int) -> int:
    """After a failed sync reflection: hold off until the log changes."""
    return observation_tokens


def is_retry_suppressed(triggered_by: ReflectionTrigger, suppressed_at: int | None, observation_tokens: int) -> bool:
    """Only threshold triggers are suppressed, and only while the log is exactly as large as when
    the best effort was made: any new observation (+1 token) re-enables reflection."""
    return triggered_by == "threshold" and suppressed_at is not None and suppressed_at == observation_tokens


# --- §6.8 what ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReflectionSlice:
    """The leading lines a buffered reflection covers and the numbers stored with it."""

    line_count: int
    text: str
    estimated_tokens: int
    target_tokens: int


def buffered_reflection_slice(
    observations: str, observation_tokens: int, threshold: int, buffer_activation: float
) -> ReflectionSlice:
    """Lines worth `threshold × bufferActivation` tokens, by the log's average tokens per line.

    The estimate avoids recounting; it is exact enough because the reflection only has to cover
    roughly the older half.  `line_count` is 0 when a single line already exceeds the slice
    budget; then there is nothing to buffer.
    """
    lines = observations.split("\n")
    average = observation_tokens / len(lines)
    budget = reflection_buffer_start(threshold, buffer_activation)
    count = len(lines) if average <= 0 else min(math.floor(budget / average), len(lines))
    estimate = round_half_up(average * count)
    return ReflectionSlice(
        line_count=count,
        text="\n".join(lines[:count]),
        estimated_tokens=estimate,
        target_tokens=round_half_up(estimate * BUFFERED_REFLECTION_RATIO),
    )


def merge_buffered_reflection(observations: str, reflection: str, reflected_line_count: int) -> str:
    """The new generation's log: the reflection in place of the lines it covered, followed by the
    lines appended since it started (§6.8)."""
    tail = "\n".join(observations.split("\n")[reflected_line_count:]).strip()
    return f"{reflection}\n\n{tail}" if tail else reflection


def buffered_reflection_suppressed(
    triggered_by: ReflectionTrigger,
    *,
    tail_tokens: int,
    buffered_reflection_tokens: int,
    combined_tokens: int,
    threshold: int,
    buffer_activation: float,
) -> bool:
    """Whether an early (ttl / provider_change) swap would be premature (§6.8).

    A threshold trigger always swaps.  An early one waits while the unreflected tail is still
    smaller than the reflection itself, or while the merged log is too small to be worth
    changing the cached prompt for.
    """
    if triggered_by == "threshold":
        return False
    if tail_tokens < buffered_reflection_tokens:
        return True
    return combined_tokens < reflection_activation_min_tokens(threshold, buffer_activation)


# --- §8.3 which answer (each level's guidance, §8.2, is `prompts.COMPRESSION_GUIDANCE`) --------
def compression_start_level(reflector_model: str | None, *, manual: bool = False) -> int:
    """The first ladder level (§8.3): 0 for a manual reflect; 2 for gemini-2.5-flash, which
    under-compresses at the gentler levels; 1 for any other model, or when it is unknown."""
    if manual:
        return 0
    if reflector_model and "gemini-2.5-flash" in reflector_model.lower():
        return 2
    return 1


def max_compression_level(start_level: int) -> int:
    return min(MAX_COMPRESSION_LEVEL, start_level + _LADDER_RETRIES)


def compression_levels(start_level: int) -> tuple[int, ...]:
    """Every level the ladder may try, in order."""
    return tuple(range(start_level, max_compression_level(start_level) + 1))


@dataclass(frozen=True, slots=True)
class ReflectionAttempt:
    """One Reflector answer: its level, its observation tokens, and whether it is unusable
    (degenerate, or empty for a non-empty input)."""

    level: int
    tokens: int
    failed: bool = False


@dataclass(frozen=True, slots=True)
class LadderStep:
    """What follows an attempt.

    * `accept`: commit the answer of `attempts[accepted_index]`;
    * `retry`: ask again at `next_level`; `message` is the error text of the
      `data-om-observation-failed` marker emitted before the retry;
    * `fail`: no usable answer at any level; `message` is the error.
    """

    action: Literal["accept", "retry", "fail"]
    accepted_index: int | None = None
    next_level: int | None = None
    message: str | None = None


def retry_message(input_tokens: int, tokens: int, target: int, next_level: int) -> str:
    return (
        f"Did not compress below threshold ({input_tokens} → {tokens}, target: {target}), "
        f"retrying at level {next_level}"
    )


def ladder_step(
    attempts: Sequence[ReflectionAttempt], *, start_level: int, target: int, input_tokens: int
) -> LadderStep:
    """The compression ladder (§8.3) after its latest attempt.

    `target` is the reflection threshold for a sync reflection, the slice's `target_tokens` for
    a buffered one.  An answer under target is accepted at once.  At the last level the
    smallest usable answer of the whole ladder is kept (normative choice 4; 1.31.0 kept the
    last), the later one on a tie; with none usable the ladder fails.
    """
    if not attempts:
        raise ValueError("ladder_step needs at least one attempt")
    latest = attempts[-1]
    if not latest.failed and latest.tokens < target:
        return LadderStep("accept", accepted_index=len(attempts) - 1)
    if latest.level >= max_compression_level(start_level):
        usable = [(a.tokens, -i) for i, a in enumerate(attempts) if not a.failed]
        if not usable:
            return LadderStep(
                "fail",
                message=f"Reflector produced empty output after {len(attempts)} attempt(s)",
            )
        _, negative_index = min(usable)
        return LadderStep("accept", accepted_index=-negative_index)
    tokens = input_tokens if latest.failed else latest.tokens
    next_level = latest.level + 1
    return LadderStep(
        "retry", next_level=next_level, message=retry_message(input_tokens, tokens, target, next_level)
    )
