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
    vector: bool = False
    scope: Literal["thread", "resource"] = "resource"
    instructions: str | None = None


class OmConfig(Options):
    """The whole `observationalMemory` tree. `omstream.engine.resolution.resolve` gives the effective numbers."""

    enabled: bool = True
    model: ModelSpec | None = None
    scope: Literal["thread", "resource"] = "thread"
    activate_after_idle: IdleOption = None
    activate_on_provider_change: bool = False
    share_token_budget: bool = False
    temporal_markers: bool = False
    retrieval: bool | RetrievalConfig = False
    hooks: HooksConfig = HooksConfig()
    hook_execution: Literal["non-blocking", "await"] = "non-blocking"
    # None = by scope: on in resource scope, off in thread scope (normative choice 7).
    obscure_thread_ids: bool | None = None
    observation: ObservationConfig = ObservationConfig()
    reflection: ReflectionConfig = ReflectionConfig()
    working_memory: WorkingMemoryConfig = WorkingMemoryConfig()
    # omstream options: which counter decides thresholds, and the zone dates are rendered in.
    token_counter: str = "tiktoken"
    time_zone: str = "UTC"
    # When thresholds are checked: at every step the producer reports (the original's timing),
    # at every message (producers without an agent loop), or "auto": per message until the
    # first step arrives, then per step.
    check_thresholds_at: Literal["auto", "step", "message"] = "auto"
    # omstream option: a blocking cycle whose start lies more than this before the event time of
    # a later input of its memory fails ("deadline") and the held inputs are applied: a backstop
    # for a result that never comes.  Milliseconds or a duration ("10m", "90s"); default 10 min.
    cycle_deadline: int | float | str = "10m"

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
