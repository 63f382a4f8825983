"""The whole `observationalMemory` option tree (spec §2, §9.1, §13), as written plus defaults."""

from __future__ import annotations

import math
import re
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import field_validator, model_validator
from pydantic.alias_generators import to_camel

from ..durations import parse_duration_ms
from .agents import ContinuationHints, IdleOption, ObservationConfig, ReflectionConfig
from .base import Options
from .extractors import ExtractorConfig
from .hooks import HooksConfig
from .models import ModelByInputTokens, ModelSpec, ModelWithRetries, first_set, model_name
from .problems import RuleViolations
from .rules import rule_problems
from .working_memory import WorkingMemoryConfig

__all__ = ["OPTION_NAMES", "OmConfig", "RetrievalConfig"]

_TOKEN_COUNTER = re.compile(r"^(?:tokenx|tiktoken(?::[\w.-]+)?)$")


class RetrievalConfig(Options):
    """`retrieval` as an object: observation groups and the recall tool (spec §12)."""

    vector: bool = False
    """Embed each observation group into a search index, so recall's `search` mode finds
    observations by meaning (the embedder is `[omstream] embedder`)."""
    scope: Literal["thread", "resource"] = "resource"
    """What recall may read: every thread of the asking thread's resource (`"resource"`) or the
    asking thread only (`"thread"`)."""
    instructions: str | None = None
    """Text added to the agent's recall guidance, under `### Additional recall guidance`."""


class OmConfig(Options):
    """The whole `observationalMemory` tree. `omstream.engine.rules.resolution.resolve` gives the effective numbers."""

    enabled: bool = True
    """`false` turns the memory off: messages reach the context raw, no cycle runs and no model
    job is sent (`om observe` and `om reflect` are dead-lettered with the reason)."""
    model: ModelSpec | None = None
    """The model of both the Observer and the Reflector: a name (`"openai/gpt-5-mini"`,
    `"default"` for `google/gemini-2.5-flash`), a fallback list or a router by input size.
    Cannot be combined with `observation.model` or `reflection.model`; unset, each agent takes its
    own, then the other's, then the default model."""
    scope: Literal["thread", "resource"] = "thread"
    """`"thread"`: one memory per thread.  `"resource"`: one memory for all the threads of a
    resource (a user), keyed `resource:<resourceId>`; async buffering does not exist there."""
    activate_after_idle: IdleOption = None
    """Activate what is buffered once the thread has been idle this long (event time, not the
    clock): milliseconds, a duration (`"5m"`), `"auto"` (the prompt-cache lifetime of the actor
    model's provider) or `false`.  Applies to observations; reflections take `reflection.activateAfterIdle`."""
    activate_on_provider_change: bool = False
    """Activate what is buffered when the actor's model (its provider or model id) differs from
    the one that last answered: a new model has no prompt cache to keep."""
    share_token_budget: bool = False
    """Pool the two thresholds: messages may use what the observations leave of
    `messageTokens + observationTokens`, and the other way round.  Needs async buffering off
    (`observation.bufferTokens = false`, or resource scope)."""
    temporal_markers: bool = False
    """Insert a gap marker before a message that comes 10 minutes or more (in event time) after
    the one before it: a reminder such as `2 hours 15 minutes later — 01/15/2026, 2:30 PM PST`,
    counted with the messages, and an `om-temporal-gap` event."""
    retrieval: bool | RetrievalConfig = False
    """Observation groups and the recall tool: `true` for the defaults of the `retrieval` table
    below, or that table."""
    hooks: HooksConfig = HooksConfig()
    """Lifecycle hooks, as `"module:function"` references."""
    hook_execution: Literal["non-blocking", "await"] = "non-blocking"
    """`"non-blocking"`: hooks run as tasks nothing waits for; `"await"`: the fold agent waits
    for each before its next batch (async-buffer cycles' hooks always run non-blocking).  A
    hook that raises is logged and never fails the cycle."""
    obscure_thread_ids: bool | None = None
    """Show thread ids to the models only as their xxhash32 (8 hex digits).  Unset: by scope, on
    in resource scope and off in thread scope (normative choice 7)."""
    observation: ObservationConfig = ObservationConfig()
    """When the Observer runs and how it is called."""
    reflection: ReflectionConfig = ReflectionConfig()
    """When the Reflector condenses the observations and how it is called."""
    working_memory: WorkingMemoryConfig = WorkingMemoryConfig()
    """The working-memory document `observation.manageWorkingMemory` keeps (an omstream option)."""
    token_counter: str = "tiktoken"
    """Which counter decides thresholds (an omstream option): `"tiktoken"` (exact, `o200k_base`),
    `"tiktoken:<encoding>"`, or `"tokenx"` (the original's estimator, for parity)."""
    time_zone: str = "UTC"
    """The IANA time zone dates are rendered in, in observations and markers (an omstream
    option)."""
    check_thresholds_at: Literal["auto", "step", "message"] = "auto"
    """When thresholds are checked: at every step the producer reports (the original's timing),
    at every message (producers without an agent loop), or `"auto"`: per message until the
    thread's first step arrives, then per step."""
    cycle_deadline: int | float | str = "10m"
    """A blocking cycle whose start lies more than this before the event time of a later input
    of its memory fails (`deadline`) and the inputs it held are applied: a backstop for a model
    result that never comes (an omstream option).  Milliseconds or a duration (`"10m"`, `"90s"`)."""

    @field_validator("cycle_deadline", mode="before")
    @classmethod
    def _deadline(cls, value: int | float | str) -> int | float | str:
        try:
            ms = parse_duration_ms(value) if isinstance(value, str) else value
        except ValueError:
            ms = 0
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms <= 0:
            raise ValueError(f"{value!r} is not a cycle deadline; use milliseconds (600000) or a "
                             "duration such as '10m' or '90s', more than zero")
        return value

    @property
    def cycle_deadline_ms(self) -> int | float:
        """`cycleDeadline` in milliseconds."""
        value = self.cycle_deadline
        return parse_duration_ms(value) if isinstance(value, str) else value

    @field_validator("token_counter")
    @classmethod
    def _counter(cls, value: str) -> str:
        if not _TOKEN_COUNTER.match(value):
            raise ValueError(f"unknown token counter {value!r}; use 'tiktoken' (exact, the default), "
                             "'tokenx' (the original's estimator) or 'tiktoken:<encoding>'")
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}; use an IANA name such as 'UTC' or "
                             "'Europe/Berlin'") from None
        return value

    @model_validator(mode="after")
    def _rules(self) -> OmConfig:
        problems = rule_problems(self)
        if problems:
            raise RuleViolations(problems)
        return self

    @property
    def async_buffering(self) -> bool:
        """Buffering runs unless `bufferTokens` is false or the scope is `resource` (§2)."""
        return self.observation.buffer_tokens is not False and self.scope == "thread"

    @property
    def observer_model_spec(self) -> ModelSpec | None:
        """Top-level → observation → reflection (§2); None means the default model."""
        return first_set(self.model, self.observation.model, self.reflection.model)

    @property
    def reflector_model_spec(self) -> ModelSpec | None:
        """Top-level → reflection → observation (§2); None means the default model."""
        return first_set(self.model, self.reflection.model, self.observation.model)

    @property
    def observer_model(self) -> str:
        return model_name(self.observer_model_spec)

    @property
    def reflector_model(self) -> str:
        return model_name(self.reflector_model_spec)


def _option_names() -> dict[str, str]:
    """snake_case field name → documented name, for every model of the tree."""
    names: dict[str, str] = {}
    for model in (OmConfig, ObservationConfig, ReflectionConfig, ExtractorConfig, HooksConfig,
                  ModelWithRetries, ModelByInputTokens, ContinuationHints, RetrievalConfig):
        for name, info in model.model_fields.items():
            names[name] = info.alias or to_camel(name)
    return names


#: snake_case field name → the documented (camelCase) name problems are reported under.
OPTION_NAMES = _option_names()
