"""A model choice as data (spec §2, §13): a name, a fallback list, or a router by input size.

* a name: `"openai/gpt-5-mini"`, or `"default"` for `DEFAULT_MODEL`;
* a `ModelWithRetries` fallback list: `[{model = "...", maxRetries = 2}, ...]`;
* a `ModelByInputTokens` router: `{upTo = {"10000" = "model-a", "40000" = "model-b"}}`.

`model_name` gives the one name OM introspects a choice by (token counting, TTLs, temperature).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Discriminator, Tag, WithJsonSchema, field_validator

from .base import Options
from .numbers import number, tidy, whole

__all__ = [
    "DEFAULT_MODEL",
    "MODEL_TAGS",
    "ModelByInputTokens",
    "ModelName",
    "ModelSettings",
    "ModelSpec",
    "ModelWithRetries",
    "ProviderOptions",
    "first_set",
    "is_default_choice",
    "model_name",
    "model_supports_temperature",
    "spec_supports_temperature",
]

DEFAULT_MODEL = "google/gemini-2.5-flash"


def _model_name_value(value: str) -> str:
    if not value.strip():
        raise ValueError("a model name cannot be empty; use e.g. 'openai/gpt-5-mini' or 'default'")
    return value.strip()


ModelName = Annotated[str, AfterValidator(_model_name_value)]


def _model_settings(value: Any) -> dict[str, Any]:
    """modelSettings: `temperature` and `maxOutputTokens` are checked, other keys pass through."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{value!r} is not an object; "
                         "use e.g. {temperature = 0.3, maxOutputTokens = 100000}")
    out: dict[str, Any] = {}
    for key, setting in value.items():
        name = "maxOutputTokens" if key == "max_output_tokens" else key
        if name == "temperature" and (number(setting, "use e.g. temperature = 0.3") < 0):
            raise ValueError(f"temperature must be >= 0, got {setting}; use e.g. temperature = 0.3")
        if name == "maxOutputTokens":
            setting = whole(setting, "use e.g. maxOutputTokens = 100000", 1)
        out[name] = setting
    return out


ModelSettings = Annotated[
    dict[str, Any],
    BeforeValidator(_model_settings),
    WithJsonSchema({
        "type": "object",
        "properties": {"temperature": {"type": "number", "minimum": 0},
                       "maxOutputTokens": {"type": "integer", "exclusiveMinimum": 0}},
        "additionalProperties": True,
    }),
]


def _provider_options(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise ValueError(
            f"{value!r} must map each provider to its options; use e.g. "
            "{google = {thinkingConfig = {thinkingBudget = 215}}}")
    return value


ProviderOptions = Annotated[dict[str, dict[str, Any]], BeforeValidator(_provider_options)]


class ModelWithRetries(Options):
    """One entry of a fallback list: tried in order, each with its own retries and settings."""

    id: str | None = None
    """A name for the entry: in the logs, and in the answer's `providerMetadata.omstream.modelId`
    (so in the end hooks) when this entry answered."""
    model: ModelName
    """The model's name (`"openai/gpt-5-mini"`, or `"default"`); the first entry's is the one OM
    introspects the choice by (token counting, prompt-cache lifetime, temperature)."""
    max_retries: int | None = None
    """Retries of this entry before the next is tried. Unset: the worker's `model_retries`."""
    enabled: bool = True
    """`false` skips the entry; at least one entry must be enabled."""
    model_settings: ModelSettings = {}
    """Call settings of this entry, over the agent's `modelSettings`."""
    provider_options: ProviderOptions | None = None
    """Provider options of this entry, instead of the agent's `providerOptions`."""
    headers: dict[str, str] = {}
    """HTTP headers of this entry's calls (they travel in the job, sealed with a namespace key)."""

    @field_validator("max_retries", mode="before")
    @classmethod
    def _retries(cls, value: Any) -> int | None:
        if value is None:
            return None
        return whole(value, "use e.g. maxRetries = 2, or leave it out", 0)


def _fallbacks(value: tuple[ModelWithRetries, ...]) -> tuple[ModelWithRetries, ...]:
    if not value:
        raise ValueError("an empty model list names no model; list at least one {model = '...'} "
                         "entry, or give a single model name")
    if not any(entry.enabled for entry in value):
        raise ValueError("every entry of the model list is disabled; set enabled = true on at "
                         "least one entry")
    return value


class ModelByInputTokens(Options):
    """Pick the model by the size of the call: `upTo = {"10000" = "small", "40000" = "big"}`.

    Limits are inclusive upper bounds of input tokens; a call above the largest limit fails.
    """

    up_to: dict[int | float, ModelName]
    """Input-token limit → model name: a call goes to the first model whose limit is at least its
    input tokens (limits are inclusive, written as strings in TOML: `"10000" = "model-a"`)."""

    @field_validator("up_to", mode="before")
    @classmethod
    def _limits(cls, value: Any) -> dict[int | float, Any]:
        example = 'use e.g. upTo = {"10000" = "google/gemini-2.5-flash", "40000" = "openai/gpt-4o"}'
        if not isinstance(value, Mapping) or not value:
            raise ValueError(f"needs at least one token limit -> model entry; {example}")
        limits: dict[int | float, Any] = {}
        for key, model in value.items():
            limit = _threshold_key(key)
            if limit is None:
                raise ValueError(f"ModelByInputTokens threshold keys must be positive numbers. "
                                 f"Got: {key}; {example}")
            if limit in limits:
                raise ValueError(f"the limit {key} appears twice; keep one entry per limit")
            limits[limit] = model
        return dict(sorted(limits.items()))

    def thresholds(self) -> tuple[int | float, ...]:
        """The limits, ascending."""
        return tuple(self.up_to)

    def resolve(self, input_tokens: float) -> str:
        """The model of the first tier whose limit is >= `input_tokens`."""
        for limit, model in self.up_to.items():
            if input_tokens <= limit:
                return model
        largest = self.thresholds()[-1]
        raise ValueError(
            f"ModelByInputTokens: input token count ({input_tokens}) exceeds the largest configured "
            f"threshold ({largest}). Please configure a higher threshold or use a larger model.")


def _threshold_key(key: Any) -> int | float | None:
    if isinstance(key, bool):
        return None
    try:
        limit = float(key)
    except (TypeError, ValueError):
        return None
    return tidy(limit) if math.isfinite(limit) and limit > 0 else None


#: The discriminator's tags: pydantic puts them in an error's location, where no user wrote them.
MODEL_TAGS = ("model-name", "model-with-retries", "model-by-input-tokens")


def _model_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "model-name"
    if isinstance(value, (list, tuple)):
        return "model-with-retries"
    if isinstance(value, (Mapping, ModelByInputTokens)):
        return "model-by-input-tokens"
    return None


#: A model choice as data: a name, a fallback list, or a router by input size.
ModelSpec = Annotated[
    Annotated[ModelName, Tag("model-name")]
        | Annotated[tuple[ModelWithRetries, ...], AfterValidator(_fallbacks), Tag("model-with-retries")]
        | Annotated[ModelByInputTokens, Tag("model-by-input-tokens")],
    Discriminator(
        _model_kind, custom_error_type="model_choice",
        custom_error_message=(
            "a model is a name such as 'openai/gpt-5-mini' (or 'default'), a list of "
            "{model, maxRetries, ...} fallbacks, or {upTo = {<tokens> = <model>}}; use one of these"),
    ),
]


def model_name(spec: ModelSpec | None) -> str:
    """The one name OM uses to introspect a model choice (token counting, TTLs, temperature).

    Unset or `'default'` is the default model, a list is its first entry (§13), a router its
    smallest tier; route real calls with `ModelByInputTokens.resolve`.
    """
    if spec is None or spec == "default":
        return DEFAULT_MODEL
    if isinstance(spec, str):
        return spec
    if isinstance(spec, ModelByInputTokens):
        return model_name(next(iter(spec.up_to.values())))
    return model_name(spec[0].model)


_NO_TEMPERATURE = re.compile(r"^(?:o[134](?:$|[-.])|gpt-5|deepseek-reasoner)")


def model_supports_temperature(model: str) -> bool:
    """Whether a model accepts `temperature`: reasoning families (o1/o3/o4, gpt-5 except its
    chat variants, deepseek-reasoner) reject or ignore it; everything else is assumed to."""
    model_id = model.rsplit("/", 1)[-1].lower()
    if model_id.startswith("gpt-5") and "chat" in model_id:
        return True
    return not _NO_TEMPERATURE.match(model_id)


def spec_supports_temperature(spec: ModelSpec | None) -> bool:
    """Whether every model a choice may call accepts `temperature` (a router: each tier)."""
    if isinstance(spec, ModelByInputTokens):
        return all(model_supports_temperature(model_name(m)) for m in spec.up_to.values())
    return model_supports_temperature(model_name(spec))


def is_default_choice(spec: ModelSpec | None) -> bool:
    """Unset, `'default'` or a router: the choices that get the 100 000 maxOutputTokens default."""
    return spec is None or spec == "default" or isinstance(spec, ModelByInputTokens)


def first_set(*specs: ModelSpec | None) -> ModelSpec | None:
    """The first model choice given, in the order the agents inherit them; None: the default."""
    return next((s for s in specs if s is not None), None)
