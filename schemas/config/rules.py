"""The cross-option rules of spec §2: combinations each option allows alone but not together.

They run when the tree is validated (`OmConfig`'s model validator), so an impossible combination
stops `om worker` at start-up.  The effective numbers are the engine's (`omstream.engine.rules.thresholds`,
`omstream.engine.rules.resolution`); a rule here only reads an option as far as its check needs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .agents import BUFFER_TOKENS_HINT
from .extractors import WORKING_MEMORY_SLUG
from .numbers import tidy
from .problems import Problem

if TYPE_CHECKING:
    from .options import OmConfig

__all__ = ["rule_problems"]

#: From this value on, `blockAfter` is a token count; below it, a multiplier of the threshold.
_ABSOLUTE_BLOCK_AFTER = 100


def _explicit_buffering(om: OmConfig) -> list[str]:
    """The async-buffering options set, by path: the original refuses them in resource scope.
    `bufferTokens: false` turns buffering off, and the activation ratios then ask for nothing."""
    obs, refl = om.observation, om.reflection
    if "buffer_tokens" in obs.model_fields_set:
        paths = ["observation.bufferTokens"] if obs.buffer_tokens is not False else []
    else:
        paths = [path for path, options in (("observation.bufferActivation", obs),
                                            ("reflection.bufferActivation", refl))
                 if "buffer_activation" in options.model_fields_set]
    return paths + (["observation.bufferOnIdle"] if obs.buffer_on_idle else [])


def rule_problems(om: OmConfig) -> list[Problem]:
    """Every §2 rule the tree breaks, each under the option to change."""
    obs = om.observation
    problems: list[Problem] = []
    if om.model is not None and (obs.model is not None or om.reflection.model is not None):
        problems.append(Problem("model", (
            "cannot be combined with observation.model or reflection.model; set the top-level "
            "model for both agents, or remove it and set the per-agent models")))
    buffering = _explicit_buffering(om) if om.scope == "resource" else []
    if buffering:
        problems += [Problem(path, (
            "asks for async buffering, which is not supported with scope: 'resource' (spec §2: "
            "buffering is always off there). Remove it, or use scope: 'thread'; "
            "observation: { bufferTokens: false } states the resource default.")) for path in buffering]
        return problems
    if om.share_token_budget and om.async_buffering:
        problems.append(Problem("shareTokenBudget", (
            "is not yet compatible with async buffering; set observation.bufferTokens = false "
            "(a temporary limitation), or turn shareTokenBudget off")))
    problems += _observation_buffer_problems(om) + _reflection_buffer_problems(om)
    slugs = {e.slug for e in obs.extract}
    if obs.manage_working_memory and WORKING_MEMORY_SLUG in slugs:
        problems.append(Problem("observation.extract", (
            f"an extractor slugs to {WORKING_MEMORY_SLUG!r}, which observation.manageWorkingMemory "
            "adds itself; rename that extractor or turn manageWorkingMemory off")))
    return problems


def _buffer_size(buffer_tokens: int | float, message_tokens: int) -> int | float:
    """`bufferTokens` in tokens, as far as the rule needs it: a ratio below 1 of messageTokens,
    rounded half up, else the count itself (the engine's `resolve_buffer_tokens`, which
    tests/unit/schemas/test_config_rules.py holds this to)."""
    if buffer_tokens < 1:
        return math.floor(message_tokens * buffer_tokens + 0.5)
    return tidy(buffer_tokens)


def _block_after_below(block_after: int | float | None, threshold: int) -> int | float | None:
    """An absolute `blockAfter` not above its threshold, tidied for the message; None when fine.

    The documentation says an absolute count "must be greater than" the threshold: at the
    threshold itself it would block where buffering was meant to take over.  Only a token count
    can fall there: a multiplier is at least 1 (its field refuses less) and resolves above."""
    if block_after is None or block_after < _ABSOLUTE_BLOCK_AFTER:
        return None
    limit = tidy(block_after)
    return limit if limit <= threshold else None


def _observation_buffer_problems(om: OmConfig) -> list[Problem]:
    obs = om.observation
    tokens = obs.message_tokens
    if obs.buffer_tokens is False or not om.async_buffering:
        if obs.block_after is None:
            return []
        why = "scope is 'resource'" if om.scope == "resource" else "observation.bufferTokens is false"
        return [Problem("observation.blockAfter", (
            f"only applies with async buffering, which is off ({why}); remove blockAfter, or turn "
            "buffering on with observation.bufferTokens (e.g. 0.2) in thread scope"))]
    problems = []
    size = _buffer_size(obs.buffer_tokens, tokens)
    if not 1 <= size < tokens:
        problems.append(Problem("observation.bufferTokens", (
            f"{obs.buffer_tokens} resolves to {size} tokens, which must be at least 1 and below "
            f"observation.messageTokens ({tokens}); {BUFFER_TOKENS_HINT}")))
    if obs.buffer_activation >= 1000 and obs.buffer_activation >= tokens:
        problems.append(Problem("observation.bufferActivation", (
            f"{obs.buffer_activation} tokens to keep after activation must be below "
            f"observation.messageTokens ({tokens}); lower it, or use a ratio in (0, 1] such as 0.8")))
    limit = _block_after_below(obs.block_after, tokens)
    if limit is not None:
        problems.append(Problem("observation.blockAfter", (
            f"{obs.block_after} resolves to {limit} tokens; it must be greater than "
            f"observation.messageTokens ({tokens}): use a multiplier >= 1 such as 1.2, or an absolute "
            f"count above {tokens}")))
    return problems


def _reflection_buffer_problems(om: OmConfig) -> list[Problem]:
    refl = om.reflection
    tokens = refl.observation_tokens
    if refl.block_after is None:
        return []
    if not om.async_buffering:
        return [Problem("reflection.blockAfter", (
            "only applies with async reflection, which is off with async buffering; remove "
            "reflection.blockAfter, or turn buffering on (observation.bufferTokens, thread scope)"))]
    limit = _block_after_below(refl.block_after, tokens)
    if limit is not None:
        return [Problem("reflection.blockAfter", (
            f"{refl.block_after} resolves to {limit} tokens; it must be greater than "
            f"reflection.observationTokens ({tokens}): use a multiplier >= 1 such as 1.2, or an "
            f"absolute count above {tokens}"))]
    return []
