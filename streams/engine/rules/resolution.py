"""The effective configuration (spec §2, §2.1): every default filled in, every ratio in tokens.

`OmConfig` keeps the options as written; `resolve` computes what the fold decides with — the
absolute buffer sizes, ramp point, retention floor, block-after limits, per-agent model, settings
and provider options — and is what `om config check` prints.  The numbers are the engine's:
the schemas validate options, the engine owns every threshold derived from them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from omstream.schemas.config import ContinuationHints, ModelByInputTokens, ModelSpec, OmConfig, RetrievalConfig
from omstream.schemas.config.extractors import WORKING_MEMORY_SLUG
from omstream.schemas.config.models import is_default_choice, model_name, spec_supports_temperature
from omstream.schemas.config.numbers import tidy
from omstream.schemas.durations import IdleActivation, parse_activate_after_idle

from .thresholds import (
    buffer_ramp_point,
    max_threshold,
    message_threshold,
    min_buffer_tokens,
    reflection_buffer_start,
    resolve_activation_ratio,
    resolve_block_after,
    resolve_buffer_tokens,
    resolve_retention_floor,
)

__all__ = [
    "ResolvedWorkingMemory",
    "LOCAL_PREFIX",
    "ResolvedConfig",
    "ResolvedModel",
    "ResolvedObservation",
    "ResolvedReflection",
    "ResolvedRetrieval",
    "is_local",
    "resolve",
]

DEFAULT_MAX_OUTPUT_TOKENS = 100_000
DEFAULT_BLOCK_AFTER = 1.2
OBSERVER_TEMPERATURE = 0.3
REFLECTOR_TEMPERATURE = 0.0
OBSERVER_THINKING_BUDGET = 215
REFLECTOR_THINKING_BUDGET = 1024


# The models layer's prefix (`omstream.models.local.PREFIX`); the engine never imports a model client.
LOCAL_PREFIX = "local/"


def is_local(model: str) -> bool:
    """A model served in-process by llama.cpp (`local/<name>`), whose answers a grammar can hold."""
    return model.startswith(LOCAL_PREFIX)


@dataclass(frozen=True)
class ResolvedModel:
    """One agent's model call: what to call, with which settings and provider options."""

    spec: ModelSpec                      # a name (never 'default'), a fallback list or a router
    name: str                            # for introspection: first entry / smallest tier
    routing: Literal["single", "fallbacks", "by-input-tokens"]
    default_choice: bool                 # unset, 'default' or a router (gets maxOutputTokens)
    settings: dict[str, Any]
    provider_options: dict[str, Any]

    def for_input_tokens(self, input_tokens: float) -> str:
        """The model name for a call of this size (routers resolve; others are fixed)."""
        if isinstance(self.spec, ModelByInputTokens):
            return model_name(self.spec.resolve(input_tokens))
        return self.name

    @property
    def constrained(self) -> bool:
        """Its answers are decoded under the answer's grammar (`jobs`): a local model (`local/`,
        by its first entry or smallest tier), unless its settings turn the grammar off
        (`grammar = ""`).  Its prompts then leave out the worked example: the grammar holds the
        format, and a small model copies an example's content (measured on LoCoMo: an Observer
        under the grammar wrote the example's cat-food lines and hints into a clean block)."""
        return is_local(self.name) and self.settings.get("grammar") != ""


@dataclass(frozen=True)
class ResolvedObservation:
    model: ResolvedModel
    message_tokens: int
    max_threshold: int                   # messageTokens, or the shared budget with shareTokenBudget
    buffer_tokens: int | float | None    # None: async buffering off
    buffer_ramp_point: int | float | None
    min_buffer_tokens: int | float | None
    buffer_activation: int | float | None
    activation_ratio: float | None
    retention_floor: int | float | None
    block_after: int | float | None
    buffer_on_idle: bool
    activate_after_idle: IdleActivation
    activate_on_provider_change: bool
    max_tokens_per_batch: int
    previous_observer_tokens: int | None  # None: no limit
    observe_attachments: bool | str | tuple[str, ...]
    instruction: str | None
    thread_title: bool
    manage_working_memory: bool
    current_task_hint: bool
    suggested_response_hint: bool
    extractors: tuple[str, ...]          # slugs in run order, built-ins first


@dataclass(frozen=True)
class ResolvedReflection:
    model: ResolvedModel
    observation_tokens: int
    buffer_activation: int | float | None
    buffer_start: int | float | None      # background reflection starts at this many tokens
    block_after: int | float | None
    activate_after_idle: IdleActivation
    activate_on_provider_change: bool
    instruction: str | None
    current_task_hint: bool
    suggested_response_hint: bool
    extractors: tuple[str, ...]


@dataclass(frozen=True)
class ResolvedRetrieval:
    vector: bool
    scope: Literal["thread", "resource"]
    instructions: str | None


@dataclass(frozen=True)
class ResolvedWorkingMemory:
    """Who writes the working-memory document and how the agent sees it (1.31.0's
    `applyManagedWorkingMemoryDefaults`: an Observer-kept document is not the agent's to write,
    and reaches it as a state signal)."""

    enabled: bool
    agent_managed: bool          # the agent has the tool (only when enabled)
    use_state_signals: bool      # shown as a state signal, not in the system messages
    tool_name: str               # `updateWorkingMemory`, or `setWorkingMemory` with state signals


@dataclass(frozen=True)
class ResolvedConfig:
    """The effective configuration: every default filled in, every ratio turned into tokens."""

    enabled: bool
    scope: Literal["thread", "resource"]
    async_buffering: bool
    share_token_budget: bool
    total_budget: int | None             # messageTokens + observationTokens when shared
    temporal_markers: bool
    retrieval: ResolvedRetrieval | None
    hooks: dict[str, str]
    hook_execution: Literal["non-blocking", "await"]
    obscure_thread_ids: bool
    token_counter: str
    time_zone: str
    check_thresholds_at: str
    observation: ResolvedObservation
    reflection: ResolvedReflection
    working_memory: ResolvedWorkingMemory

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with the documented camelCase names."""
        out: dict[str, Any] = _jsonable(self)
        return out


def _jsonable(value: Any) -> Any:
    if is_dataclass(value):
        return {to_camel(f.name): _jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def resolve(om: OmConfig) -> ResolvedConfig:
    """The effective configuration of `om` (computed on each call: the fold resolves once per
    `EngineConfig`)."""
    retrieval = om.retrieval
    if retrieval is True:
        retrieval = RetrievalConfig()
    return ResolvedConfig(
        enabled=om.enabled,
        scope=om.scope,
        async_buffering=om.async_buffering,
        share_token_budget=om.share_token_budget,
        total_budget=(om.observation.message_tokens + om.reflection.observation_tokens
                      if om.share_token_budget else None),
        temporal_markers=om.temporal_markers,
        retrieval=(ResolvedRetrieval(retrieval.vector, retrieval.scope, retrieval.instructions)
                   if isinstance(retrieval, RetrievalConfig) else None),
        hooks=om.hooks.references(),
        hook_execution=om.hook_execution,
        obscure_thread_ids=(om.scope == "resource" if om.obscure_thread_ids is None
                            else om.obscure_thread_ids),
        token_counter=om.token_counter,
        time_zone=om.time_zone,
        check_thresholds_at=om.check_thresholds_at,
        observation=_resolve_observation(om),
        reflection=_resolve_reflection(om),
        working_memory=_resolve_working_memory(om),
    )


def _resolve_working_memory(om: OmConfig) -> ResolvedWorkingMemory:
    options, observer_kept = om.working_memory, om.observation.manage_working_memory
    enabled = options.enabled or observer_kept
    signals = observer_kept if options.use_state_signals is None else options.use_state_signals
    managed = (not observer_kept) if options.agent_managed is None else options.agent_managed
    return ResolvedWorkingMemory(enabled=enabled, agent_managed=enabled and managed,
                                 use_state_signals=enabled and signals,
                                 tool_name="setWorkingMemory" if signals else "updateWorkingMemory")


def _hints(value: bool | ContinuationHints) -> tuple[bool, bool]:
    if isinstance(value, ContinuationHints):
        return value.current_task, value.suggested_response
    return value, value


def _resolve_model(spec: ModelSpec | None, settings: dict[str, Any], provider_options: dict[str, Any] | None,
                   temperature: float, thinking_budget: int) -> ResolvedModel:
    defaults: dict[str, Any] = {}
    if spec_supports_temperature(spec):
        defaults["temperature"] = temperature
    if is_default_choice(spec):
        defaults["maxOutputTokens"] = DEFAULT_MAX_OUTPUT_TOKENS
    if provider_options is None:
        provider_options = {"google": {"thinkingConfig": {"thinkingBudget": thinking_budget}}}
    routing: Literal["single", "fallbacks", "by-input-tokens"]
    called: ModelSpec
    if isinstance(spec, ModelByInputTokens):
        routing, called = "by-input-tokens", spec
    elif isinstance(spec, tuple):
        routing, called = "fallbacks", spec
    else:
        routing, called = "single", model_name(spec)
    return ResolvedModel(
        spec=called, name=model_name(spec), routing=routing, default_choice=is_default_choice(spec),
        settings={**defaults, **settings}, provider_options=provider_options,
    )


def _resolve_observation(om: OmConfig) -> ResolvedObservation:
    obs, refl = om.observation, om.reflection
    tokens = obs.message_tokens
    buffering = om.async_buffering
    size = resolve_buffer_tokens(obs.buffer_tokens, tokens) if buffering else None
    current_task, suggested = _hints(obs.continuation_hints)
    builtins = (("current-task",) if current_task else ()) + (("suggested-response",) if suggested else ()) \
        + (("thread-title",) if obs.thread_title else ())
    working = (WORKING_MEMORY_SLUG,) if obs.manage_working_memory else ()
    own_idle = "activate_after_idle" in obs.model_fields_set
    idle = obs.activate_after_idle if own_idle else om.activate_after_idle
    block_after = obs.block_after or DEFAULT_BLOCK_AFTER
    return ResolvedObservation(
        model=_resolve_model(om.observer_model_spec, obs.model_settings, obs.provider_options,
                             OBSERVER_TEMPERATURE, OBSERVER_THINKING_BUDGET),
        message_tokens=tokens,
        max_threshold=max_threshold(message_threshold(tokens, refl.observation_tokens,
                                                      share_token_budget=om.share_token_budget)),
        buffer_tokens=size,
        buffer_ramp_point=tidy(buffer_ramp_point(tokens, size)) if size is not None else None,
        min_buffer_tokens=tidy(min_buffer_tokens(size)) if size is not None else None,
        buffer_activation=obs.buffer_activation if buffering else None,
        activation_ratio=resolve_activation_ratio(obs.buffer_activation, tokens) if buffering else None,
        retention_floor=resolve_retention_floor(obs.buffer_activation, tokens) if buffering else None,
        block_after=resolve_block_after(block_after, tokens) if buffering else None,
        buffer_on_idle=obs.buffer_on_idle,
        activate_after_idle=parse_activate_after_idle(idle),
        activate_on_provider_change=(om.activate_on_provider_change if obs.activate_on_provider_change is None
                                     else obs.activate_on_provider_change),
        max_tokens_per_batch=obs.max_tokens_per_batch,
        previous_observer_tokens=(None if obs.previous_observer_tokens is False
                                  else obs.previous_observer_tokens),
        observe_attachments=obs.observe_attachments,
        instruction=obs.instruction,
        thread_title=obs.thread_title,
        manage_working_memory=obs.manage_working_memory,
        current_task_hint=current_task,
        suggested_response_hint=suggested,
        extractors=builtins + tuple(e.slug for e in obs.extract) + working,
    )


def _resolve_reflection(om: OmConfig) -> ResolvedReflection:
    refl = om.reflection
    tokens = refl.observation_tokens
    buffering = om.async_buffering
    current_task, suggested = _hints(refl.continuation_hints)
    builtins = (("current-task",) if current_task else ()) + (("suggested-response",) if suggested else ())
    return ResolvedReflection(
        model=_resolve_model(om.reflector_model_spec, refl.model_settings, refl.provider_options,
                             REFLECTOR_TEMPERATURE, REFLECTOR_THINKING_BUDGET),
        observation_tokens=tokens,
        buffer_activation=refl.buffer_activation if buffering else None,
        buffer_start=tidy(reflection_buffer_start(tokens, refl.buffer_activation)) if buffering else None,
        block_after=(resolve_block_after(refl.block_after or DEFAULT_BLOCK_AFTER, tokens)
                     if buffering else None),
        activate_after_idle=parse_activate_after_idle(refl.activate_after_idle),
        activate_on_provider_change=refl.activate_on_provider_change,
        instruction=refl.instruction,
        current_task_hint=current_task,
        suggested_response_hint=suggested,
        extractors=builtins + tuple(e.slug for e in refl.extract),
    )
