"""Activation: which buffered chunks become observations, and when (spec §6.4).

Activation is instant and calls no model: a prefix of the buffered chunks is appended to the
observation log and their messages leave the live context.  Two questions, answered here as
pure functions of numbers and event times:

* **When** (`activation_trigger`): at step 0 a provider change or an idle gap longer than the
  provider's prompt-cache lifetime activates early, otherwise the unobserved tokens must have
  reached the threshold.  The threshold pipeline activates without this check.
* **How much** (`plan_activation`): the shortest prefix whose message tokens reach
  `pending − retention floor`, unless that overshoots badly or leaves almost nothing behind.

Worked example (defaults, spec §6.4): pending 30 500, floor 6 000, chunks 6 100/6 050/6 200/
6 000/3 100 → target 24 500; four chunks (24 350) fall short, five (27 450) overshoot by 2 950,
within 0.95 × 6 000 = 5 700 and leaving 3 050 ≥ 1 000, so all five activate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

__all__ = [
    "ActivationPlan",
    "ActivationTrigger",
    "Chunk",
    "activation_trigger",
    "auto_activation_ttl",
    "choose_activation_boundary",
    "did_provider_change",
    "force_max_activation",
    "idle_expired",
    "is_stale_buffer_boundary",
    "plan_activation",
    "resolve_activation_ttl",
    "split_model",
    "to_epoch_ms",
]

ActivationTrigger = Literal["threshold", "ttl", "provider_change"]

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
_SHORT_TTL = 5 * MINUTE_MS
_OPENAI_EXTENDED_TTL = HOUR_MS
_GEMINI_TTL = 24 * HOUR_MS
_DEEPSEEK_TTL = HOUR_MS
_GROQ_TTL = 2 * HOUR_MS

# Fraction of the retention floor an "over" boundary may eat into before the "under" one wins,
# and the absolute context an activation always tries to leave behind.
_MAX_OVERSHOOT_OF_FLOOR = 0.95
_MIN_REMAINING_TOKENS = 1000


@dataclass(frozen=True, slots=True)
class Chunk:
    """A buffered observation (spec §3.2), reduced to what activation decides with."""

    cycle_id: str
    message_tokens: int
    observation_tokens: int = 0
    message_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ActivationPlan:
    """The prefix of chunks to activate and the numbers the activation markers report."""

    chunks: tuple[Chunk, ...]
    pending_tokens: int
    retention_floor: float
    target_tokens: float

    @property
    def chunk_count(self) -> int:
        return len(self.chunks)

    @property
    def message_tokens(self) -> int:
        return sum(c.message_tokens for c in self.chunks)

    @property
    def observation_tokens(self) -> int:
        return sum(c.observation_tokens for c in self.chunks)

    @property
    def cycle_ids(self) -> tuple[str, ...]:
        return tuple(c.cycle_id for c in self.chunks)

    @property
    def message_ids(self) -> tuple[str, ...]:
        return tuple(mid for c in self.chunks for mid in c.message_ids)

    @property
    def remaining_tokens(self) -> int:
        """Pending tokens once the activated messages are gone (the record's count, clamped ≥ 0)."""
        return max(0, self.pending_tokens - self.message_tokens)


# --- how much: §6.4 step 6 (`swapBufferedToActive`) -----------------------------------------
def choose_activation_boundary(
    chunk_message_tokens: Sequence[int],
    *,
    retention_floor: float,
    pending_tokens: float,
    force_max: bool = False,
) -> int:
    """How many leading chunks to activate (spec §6.4 step 6); 0 only when there are none.

    `force_max` is set when the pending tokens reached blockAfter: then any overshoot is
    accepted as long as the minimum context survives.
    """
    if not chunk_message_tokens:
        return 0
    target = max(0.0, pending_tokens - retention_floor)
    over_count = under_count = 0
    over_tokens = under_tokens = 0
    cumulative = 0
    for index, tokens in enumerate(chunk_message_tokens, start=1):
        cumulative += tokens
        if cumulative >= target:
            # cumulative only grows, so the first "over" boundary is the smallest one
            if over_count == 0:
                over_count, over_tokens = index, cumulative
        elif cumulative > under_tokens:
            under_count, under_tokens = index, cumulative

    min_remaining = min(_MIN_REMAINING_TOKENS, retention_floor)
    over_leaves_enough = over_count > 0 and pending_tokens - over_tokens >= min_remaining
    if force_max and over_leaves_enough:
        return over_count
    if over_leaves_enough and over_tokens - target <= _MAX_OVERSHOOT_OF_FLOOR * retention_floor:
        return over_count
    if under_count > 0 and pending_tokens - under_tokens >= min_remaining:
        return under_count
    if over_count > 0:
        # every boundary breaks a safeguard: removing too much still beats removing nothing
        return over_count
    return 1


def plan_activation(
    chunks: Sequence[Chunk],
    *,
    retention_floor: float,
    pending_tokens: int,
    force_max: bool = False,
) -> ActivationPlan:
    """The chunks activation takes (spec §6.4 steps 5–6).

    `retention_floor` is `resolve_retention_floor(bufferActivation, threshold)` (`thresholds`);
    `pending_tokens` is the unobserved token count activation measures against.
    """
    count = choose_activation_boundary(
        [c.message_tokens for c in chunks],
        retention_floor=retention_floor,
        pending_tokens=pending_tokens,
        force_max=force_max,
    )
    return ActivationPlan(
        chunks=tuple(chunks[:count]),
        pending_tokens=pending_tokens,
        retention_floor=retention_floor,
        target_tokens=max(0.0, pending_tokens - retention_floor),
    )


def force_max_activation(pending_tokens: int, block_after: float | None) -> bool:
    """`forceMax` of §6.4 step 5: the pending tokens reached blockAfter."""
    return block_after is not None and pending_tokens >= block_after


def is_stale_buffer_boundary(unobserved_tokens: int, last_buffered_at_tokens: int) -> bool:
    """§6.4 step 1: the buffer interval boundary belongs to a context that has since shrunk
    (to under half of it), so interval counting restarts from 0."""
    return last_buffered_at_tokens > 0 and unobserved_tokens < 0.5 * last_buffered_at_tokens


# --- when: §6.4 step 3 ------------------------------------------------------------------------
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_epoch_ms(value: datetime | int | float) -> int:
    """Event time as unix milliseconds; a naive datetime is taken as UTC."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return (value - _EPOCH) // timedelta(milliseconds=1)
    return int(value)


def split_model(model: str) -> tuple[str | None, str]:
    """`provider/modelId` → (provider, modelId); a bare id has no provider."""
    slash = model.find("/")
    if slash == -1:
        return None, model
    # transport sub-namespaces (`openai.responses`) count as their base provider
    return model[:slash].split(".")[0], model[slash + 1:]


def did_provider_change(actor_model: str | None, last_model: str | None) -> bool:
    """Whether the actor's `provider/modelId` differs from the one that last answered.

    A bare model id on either side (history written without a provider) compares by model id
    only, so a missing provider never counts as a change.
    """
    if actor_model is None or last_model is None:
        return False
    actor_provider, actor_id = split_model(actor_model)
    last_provider, last_id = split_model(last_model)
    if actor_id != last_id:
        return True
    return bool(actor_provider and last_provider and actor_provider != last_provider)


_OPENAI_SHORT_CACHE = re.compile(r"gpt-4|gpt-5(?:$|-|\.[1-4](?:$|-))")


def auto_activation_ttl(model: str | None, *, prompt_cache_retention: str | None = None) -> int:
    """`activateAfterIdle: 'auto'`: the actor provider's prompt-cache lifetime in ms (§15 item 5).

    Once the cache has expired the next request pays for the whole prompt anyway, so that is when
    activating buffered chunks (which changes the prompt) costs nothing extra.  The provider is
    the part of `model` before the first `/`; a bare litellm id (`gpt-4o`, `gemini-2.5-flash`)
    is attributed to its obvious provider.
    """
    provider, model_id = split_model(model or "")
    provider, model_id = (provider or "").lower(), model_id.lower()
    if "openai" in provider or (not provider and model_id.startswith("gpt-")):
        retention = (prompt_cache_retention or "").lower()
        if retention == "24h":
            return _OPENAI_EXTENDED_TTL
        if retention == "in_memory":
            return _SHORT_TTL
        return _SHORT_TTL if _OPENAI_SHORT_CACHE.match(model_id) else _OPENAI_EXTENDED_TTL
    # litellm spells Google's providers `gemini` and `vertex_ai`; the original's `google.vertex`
    if any(name in provider for name in ("google", "gemini", "vertex")) or (
        not provider and model_id.startswith("gemini")
    ):
        return _GEMINI_TTL
    if "deepseek" in provider:
        return _DEEPSEEK_TTL
    if "groq" in provider:
        return _GROQ_TTL
    # anthropic, xai/grok, openrouter and anything unknown: the common 5-minute cache
    return _SHORT_TTL


def resolve_activation_ttl(
    activate_after_idle: int | float | Literal["auto"] | None,
    actor_model: str | None = None,
    *,
    prompt_cache_retention: str | None = None,
) -> int | float | None:
    """The idle time in ms after which buffered work activates early; None when off.

    `activate_after_idle` is the value the config loader parsed (ms, `'auto'` or None; see
    `omstream.schemas.durations.parse_activate_after_idle`); `'auto'` resolves per actor model.
    """
    if activate_after_idle == "auto":
        return auto_activation_ttl(actor_model, prompt_cache_retention=prompt_cache_retention)
    return activate_after_idle


def idle_expired(
    now: datetime | int,
    last_activity_at: datetime | int | None,
    ttl_ms: int | float | None,
) -> bool:
    """`now − lastActivityAt ≥ ttl`, with both times taken from events (normative choice 12)."""
    if ttl_ms is None or last_activity_at is None:
        return False
    return to_epoch_ms(now) - to_epoch_ms(last_activity_at) >= ttl_ms


def activation_trigger(
    *,
    has_chunks: bool,
    pending_tokens: int,
    threshold: int,
    now: datetime | int | None = None,
    last_activity_at: datetime | int | None = None,
    idle_ttl_ms: int | float | None = None,
    activate_on_provider_change: bool = False,
    actor_model: str | None = None,
    last_model: str | None = None,
) -> ActivationTrigger | None:
    """Step-0 activation check (spec §6.4 steps 2–3), in the spec's priority order.

    Returns what triggered the activation, or None when nothing should activate.
    """
    if not has_chunks:
        return None
    if activate_on_provider_change and did_provider_change(actor_model, last_model):
        return "provider_change"
    if now is not None and idle_expired(now, last_activity_at, idle_ttl_ms):
        return "ttl"
    if pending_tokens >= threshold:
        return "threshold"
    return None
