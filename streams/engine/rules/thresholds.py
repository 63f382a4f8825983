"""Token windows: when to observe, buffer, block and reflect (spec §2, §6.1, §6.2, §6.9).

Every number here is a function of configured values and token counts, nothing else.  With all
defaults (spec §2.1): messageTokens 30 000, bufferTokens 0.2 → 6 000, buffering every 6 000
tokens until the ramp point 30 000 − 6 000 × 1.1 = 23 400 and every 3 000 above it, each buffer
needing ≥ 3 000 new tokens; activation keeps a 6 000-token floor (ratio 0.8); blockAfter 1.2 →
36 000; reflection at 40 000 observation tokens, buffered from 20 000, blocking at 48 000; with
shareTokenBudget (buffering off) messages and observations share 70 000.

Configured values are resolved into token counts once, by `rules.resolution` (`resolve`) with
the `resolve_*` functions at the end of this module; the other functions take those counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from omstream.schemas.config.numbers import tidy

from .activation import choose_activation_boundary

__all__ = [
    "BUFFERED_REFLECTION_RATIO",
    "BufferCandidate",
    "StatusWindows",
    "ThresholdRange",
    "base_message_tokens",
    "base_reflection_tokens",
    "buffer_interval",
    "buffer_ramp_point",
    "dynamic_threshold",
    "effective_message_threshold",
    "effective_reflection_threshold",
    "enough_to_buffer",
    "max_threshold",
    "message_threshold",
    "min_buffer_tokens",
    "projected_message_removal",
    "reflection_activation_min_tokens",
    "reflection_buffer_activation",
    "reflection_buffer_start",
    "requires_blocking_observation",
    "resolve_activation_ratio",
    "resolve_block_after",
    "resolve_buffer_tokens",
    "resolve_retention_floor",
    "retention_floor",
    "round_half_up",
    "safe_buffer_prefix",
    "should_trigger_buffer",
    "status_windows",
]

# When bufferTokens is unknown the original still demands half of 5 000 new tokens per buffer.
_FALLBACK_BUFFER_TOKENS = 5000
# reflection.bufferActivation's default: what the reflection plan reads when buffering is off.
_REFLECTION_BUFFER_ACTIVATION = 0.5
# An absolute bufferActivation (tokens to keep) starts here; below it the value is a ratio.
_ABSOLUTE_ACTIVATION = 1000
#: A buffered reflection must shrink its slice to three quarters; the same factor sizes the
#: smallest combined log worth swapping in on an idle or provider-change trigger.
BUFFERED_REFLECTION_RATIO = 0.75


@dataclass(frozen=True, slots=True)
class ThresholdRange:
    """A message threshold that grows into unused observation space (shareTokenBudget)."""

    min: int
    max: int


Threshold = int | ThresholdRange


def round_half_up(value: float) -> int:
    """JavaScript's `Math.round` (Python's `round` rounds halves to even)."""
    return math.floor(value + 0.5)


# --- resolution of configured values (§2, §6.1; thresholds.test.ts) -----------------------
def max_threshold(threshold: Threshold) -> int:
    """`getMaxThreshold`: the value ratios resolve against."""
    return threshold.max if isinstance(threshold, ThresholdRange) else threshold


def message_threshold(message_tokens: int, reflection_tokens: int, *, share_token_budget: bool) -> Threshold:
    """The observation threshold as configured: messageTokens, or with shareTokenBudget a range
    from it up to the whole budget (messageTokens + reflection.observationTokens)."""
    if not share_token_budget:
        return message_tokens
    return ThresholdRange(message_tokens, message_tokens + reflection_tokens)


def dynamic_threshold(threshold: Threshold, observation_tokens: int) -> int:
    """`calculateDynamicThreshold` (§6.1): a range shrinks as observations fill the budget."""
    if not isinstance(threshold, ThresholdRange):
        return threshold
    return round_half_up(max(threshold.max - observation_tokens, threshold.min))


def base_message_tokens(
    override: int | None, message_tokens: int, *, buffer_tokens: float | None, buffer_activation: float | None
) -> int:
    """messageTokens, or a memory's override when it is usable (spec §2: an override at or below
    bufferTokens, or at or below an absolute bufferActivation, is ignored)."""
    if override is None:
        return message_tokens
    absolute = buffer_activation if buffer_activation is not None and buffer_activation >= _ABSOLUTE_ACTIVATION else 0
    floor = max(buffer_tokens or 0, absolute)
    return override if override > floor else message_tokens


def base_reflection_tokens(override: int | None, reflection_tokens: int) -> int:
    """reflection.observationTokens, or a memory's override (any positive count)."""
    return override or reflection_tokens


def effective_message_threshold(
    message_tokens: int, reflection_tokens: int, observation_tokens: int, *, share_token_budget: bool
) -> int:
    """The observation threshold in force (normative choice 8).

    With shareTokenBudget, messages may use whatever observations leave of the total budget,
    never less than messageTokens: `max(total − observationTokens, messageTokens)`.
    """
    threshold = message_threshold(message_tokens, reflection_tokens, share_token_budget=share_token_budget)
    return dynamic_threshold(threshold, observation_tokens)


def effective_reflection_threshold(
    message_tokens: int, reflection_tokens: int, pending_message_tokens: int, *, share_token_budget: bool
) -> int:
    """The reflection threshold in force (normative choice 8; 1.31.0 kept it fixed).

    With shareTokenBudget the pooling works both ways: short raw context lets observations grow
    to `max(total − pendingMessageTokens, observationTokens)` before reflecting.
    """
    if not share_token_budget:
        return reflection_tokens
    total = message_tokens + reflection_tokens
    return round_half_up(max(total - pending_message_tokens, reflection_tokens))


# --- async buffering (§6.2, §6.3 step 4) ---------------------------------------------------
def buffer_ramp_point(threshold: float, buffer_tokens: float) -> float:
    """Pending tokens from which buffering runs twice as often (23 400 with defaults)."""
    # ×11/10 rather than ×1.1: 6 000 × 1.1 is 6 600.000000000001 in binary floating point
    return threshold - buffer_tokens * 11 / 10


def buffer_interval(pending_tokens: float, threshold: float, buffer_tokens: float) -> float:
    """Token spacing between buffer triggers: bufferTokens, halved near the threshold so the
    last chunks before activation are small and the activation boundary lands close to target."""
    return buffer_tokens / 2 if pending_tokens >= buffer_ramp_point(threshold, buffer_tokens) else buffer_tokens


def should_trigger_buffer(
    pending_tokens: float, last_boundary: float, threshold: float, buffer_tokens: float | None
) -> bool:
    """`shouldTriggerAsyncObservation` (§6.2): pending crossed into a new interval since the last
    buffer.  `last_boundary` is the token count at which the previous buffer was triggered."""
    if buffer_tokens is None or buffer_tokens <= 0:
        return False
    interval = buffer_interval(pending_tokens, threshold, buffer_tokens)
    return math.floor(pending_tokens / interval) > math.floor(last_boundary / interval)


def min_buffer_tokens(buffer_tokens: float | None) -> float:
    """Fewest new message tokens worth a buffer call (§6.3 step 4): half of bufferTokens."""
    return (_FALLBACK_BUFFER_TOKENS if buffer_tokens is None else buffer_tokens) / 2


def enough_to_buffer(candidate_tokens: int, buffer_tokens: float | None, *, skip_minimum: bool = False) -> bool:
    """§6.3 step 4: are the candidates worth an observer call?  Idle buffering skips the minimum
    (turn end is the last chance before the user's next message)."""
    if candidate_tokens <= 0:
        return False
    return skip_minimum or candidate_tokens >= min_buffer_tokens(buffer_tokens)


def projected_message_removal(
    chunk_message_tokens: Sequence[int], buffer_activation: float, threshold: int, pending_tokens: float
) -> int:
    """`calculateProjectedMessageRemoval` (§6.4): message tokens an activation would remove now.

    Same boundary rule as activation without forceMax; 0 when there is nothing to remove.
    """
    if not chunk_message_tokens:
        return 0
    floor = resolve_retention_floor(buffer_activation, threshold)
    if pending_tokens - floor <= 0:
        return 0
    count = choose_activation_boundary(
        chunk_message_tokens, retention_floor=floor, pending_tokens=pending_tokens
    )
    return sum(chunk_message_tokens[:count])


def retention_floor(buffer_activation: float | None, threshold: int) -> float:
    """Message tokens an activation leaves in the context; 0 when buffering is off."""
    return resolve_retention_floor(buffer_activation, threshold) if buffer_activation else 0


def reflection_buffer_activation(buffer_activation: float | None) -> float:
    """reflection.bufferActivation as resolved, or its default when buffering is off (the
    reflection plan takes a number either way; without buffering nothing depends on it)."""
    return buffer_activation or _REFLECTION_BUFFER_ACTIVATION


def reflection_buffer_start(threshold: float, buffer_activation: float) -> float:
    """Observation tokens from which a background reflection starts (20 000 of 40 000 with
    defaults), and the share of the log it covers (§6.7, §6.8)."""
    return threshold * buffer_activation


def reflection_activation_min_tokens(threshold: int, buffer_activation: float) -> int:
    """Smallest merged log an idle/provider-change trigger swaps in (15 000 with defaults)."""
    return round_half_up(threshold * (1 - buffer_activation) * BUFFERED_REFLECTION_RATIO)


def requires_blocking_observation(unobserved_tokens: int, *, threshold: int, block_after: float | None) -> bool:
    """Whether a synchronous (blocking) observation must run now (normative choice 2).

    Without buffering the threshold itself blocks.  With buffering, the span between the
    threshold and blockAfter is left to buffering and activation; at blockAfter — including
    what is still uncovered after an activation — the tail is observed synchronously.
    """
    limit = threshold if block_after is None else block_after
    return unobserved_tokens >= limit


# --- status (§6.1) ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StatusWindows:
    """`getStatus` (§6.1) plus what the `data-om-status` marker reports."""

    pending_tokens: int
    threshold: int
    should_observe: bool
    should_buffer: bool
    should_block: bool
    reflection_threshold: int
    should_reflect: bool
    can_activate: bool
    buffered_message_tokens: int  # the chunks' message tokens, at most the pending ones
    unbuffered_pending_tokens: int
    projected_message_removal: int


def status_windows(
    *,
    pending_tokens: int,
    observation_tokens: int,
    message_tokens: int,
    reflection_tokens: int,
    share_token_budget: bool = False,
    buffer_tokens: float | None = None,
    buffer_activation: float | None = None,
    block_after: float | None = None,
    chunk_message_tokens: Sequence[int] = (),
    last_buffered_at_tokens: int = 0,
    buffering_in_flight: bool = False,
) -> StatusWindows:
    """The windows of one memory at one moment (spec §6.1).

    `pending_tokens` is the unobserved-message count (with the conversation overhead);
    `buffer_tokens` and `block_after` are resolved token counts, None when buffering is off;
    `buffer_activation` is as configured (ratio or absolute); `chunk_message_tokens` are the
    buffered chunks' message tokens in order.

    Buffering may trigger up to blockAfter, not only up to the threshold as in 1.31.0: under
    normative choice 2 nothing but buffering and activation happens between the two, so a burst
    that crosses the threshold with nothing buffered still gets a chunk before blockAfter.
    """
    threshold = effective_message_threshold(
        message_tokens, reflection_tokens, observation_tokens, share_token_budget=share_token_budget
    )
    reflection_threshold = effective_reflection_threshold(
        message_tokens, reflection_tokens, pending_tokens, share_token_budget=share_token_budget
    )
    buffered = min(sum(chunk_message_tokens), pending_tokens)
    async_on = buffer_tokens is not None
    buffer_ceiling = block_after if block_after is not None else threshold
    should_buffer = (
        async_on
        and not buffering_in_flight
        and pending_tokens < buffer_ceiling
        and should_trigger_buffer(pending_tokens, last_buffered_at_tokens, threshold, buffer_tokens)
    )
    projection = (
        projected_message_removal(chunk_message_tokens, buffer_activation, threshold, pending_tokens)
        if async_on and buffer_activation is not None
        else 0
    )
    return StatusWindows(
        pending_tokens=pending_tokens,
        threshold=threshold,
        should_observe=pending_tokens >= threshold,
        should_buffer=should_buffer,
        should_block=requires_blocking_observation(pending_tokens, threshold=threshold, block_after=block_after),
        reflection_threshold=reflection_threshold,
        should_reflect=observation_tokens >= reflection_threshold,
        can_activate=len(chunk_message_tokens) > 0,
        buffered_message_tokens=buffered,
        unbuffered_pending_tokens=max(0, pending_tokens - buffered),
        projected_message_removal=projection,
    )


# --- safe buffer prefix (§6.9) --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BufferCandidate:
    """An unobserved message as the safe-prefix rule sees it."""

    message_id: str
    created_at_ms: int
    tool_call_ids: frozenset[str] = frozenset()
    has_pending_tool_call: bool = False  # a tool-invocation part still in state `call`


def safe_buffer_prefix(candidates: Sequence[BufferCandidate]) -> tuple[BufferCandidate, ...]:
    """The candidates a buffer may take now, oldest first; empty means "defer" (spec §6.9).

    Only the newest message may be cut off, and only when it holds a pending tool call: the
    observer must not see half a tool exchange, and the buffer cursor (newest buffered
    `createdAt` + 1 ms) must not hide the held-back message once its result arrives.
    """
    ordered = sorted(candidates, key=lambda c: c.created_at_ms)
    if not ordered:
        return ()
    newest_at = ordered[-1].created_at_ms
    newest = [c for c in ordered if c.created_at_ms == newest_at]
    if not any(c.has_pending_tool_call for c in newest):
        return tuple(ordered)
    if len(newest) > 1:
        return ()
    held_back = ordered[-1]
    kept = ordered[:-1]
    for candidate in kept:
        if candidate.created_at_ms + 1 >= held_back.created_at_ms:
            return ()
        if candidate.tool_call_ids & held_back.tool_call_ids:
            return ()
    return tuple(kept)


# --- configured values in tokens (§2.1; thresholds.ts) ---------------------------------------
def resolve_buffer_tokens(value: float | Literal[False] | None, threshold: int) -> float | None:
    """`bufferTokens` in tokens: a ratio below 1 of the threshold (rounded), else absolute."""
    if value is None or value is False:
        return None
    return round_half_up(threshold * value) if value < 1 else tidy(value)


def resolve_block_after(value: float | None, threshold: int) -> float | None:
    """`blockAfter` in tokens: a multiplier in [1, 100) of the threshold (rounded), else absolute."""
    if value is None:
        return None
    return round_half_up(value * threshold) if value < 100 else tidy(value)


def resolve_retention_floor(activation: float, threshold: float) -> float:
    """Message tokens kept after activation: `threshold*(1-ratio)`, or the absolute value (>= 1000)."""
    if activation >= _ABSOLUTE_ACTIVATION:
        return tidy(activation)
    return tidy(threshold * (1 - min(max(activation, 0.0), 1.0)))


def resolve_activation_ratio(activation: float, threshold: float) -> float:
    """The share of the threshold removed on activation, in [0, 1]."""
    ratio = 1 - activation / threshold if activation >= _ABSOLUTE_ACTIVATION else activation
    return tidy(min(max(ratio, 0.0), 1.0))
