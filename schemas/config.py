"""The `observationalMemory` option tree (spec §2, §9.1, §13), read from a file, checked at load.

Every documented option exists here, in camelCase or snake_case, and every rule of §2 is checked
when the configuration is loaded, not when the first memory hits a threshold: a typo or an
impossible combination should stop `om worker` at start-up with a message that names the option
and says how to fix it, instead of surfacing hours later inside a fold. `load_om_config` raises
`OmConfigError` (a ValueError) listing every problem; `check_om_config` returns them.

Configuration comes from files, so everything that is code in the original is data here:

* a model is a name (`"openai/gpt-5-mini"`, `"default"`), a `ModelWithRetries` fallback list
  (`[{model = "...", maxRetries = 2}, ...]`) or a `ModelByInputTokens` router
  (`{upTo = {"10000" = "model-a", "40000" = "model-b"}}`);
* lifecycle hooks and extractor callbacks are *references* `"package.module:function"`. They are
  only checked for shape at load (importing user code while validating a file would make
  `om config check` run arbitrary code and fail on a machine without the app's packages); the
  process that calls them imports them with `load_reference` / `HooksConfig.load()`;
* an extractor schema is a JSON Schema object or a `"module:PydanticModel"` reference.

`OmConfig` keeps the options as written (plus defaults); `OmConfig.resolved()` computes the
effective numbers of §2/§2.1 (absolute buffer sizes, ramp point, retention floor, block-after
limits, per-agent model, settings and provider options), which is what `om config check` prints.
"""

from __future__ import annotations

import difflib
import importlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from .durations import IdleActivation, parse_activate_after_idle, parse_duration_ms
from .errors import OmError

__all__ = [
    "BUILT_IN_SLUGS",
    "DEFAULT_MODEL",
    "RESERVED_SLUGS",
    "ContinuationHints",
    "ExtractorConfig",
    "HooksConfig",
    "ModelByInputTokens",
    "ModelSpec",
    "ModelWithRetries",
    "ObservationConfig",
    "OmConfig",
    "OmConfigError",
    "Problem",
    "ReflectionConfig",
    "ResolvedConfig",
    "ResolvedModel",
    "ResolvedObservation",
    "ResolvedReflection",
    "ResolvedRetrieval",
    "RetrievalConfig",
    "check_om_config",
    "load_om_config",
    "load_reference",
    "model_name",
    "unsupported_problems",
    "model_supports_temperature",
    "resolve_activation_ratio",
    "resolve_block_after",
    "resolve_buffer_tokens",
    "resolve_retention_floor",
    "slugify",
]

DEFAULT_MODEL = "google/gemini-2.5-flash"
DEFAULT_MAX_OUTPUT_TOKENS = 100_000
DEFAULT_BLOCK_AFTER = 1.2
OBSERVER_TEMPERATURE = 0.3
REFLECTOR_TEMPERATURE = 0.0
OBSERVER_THINKING_BUDGET = 215
REFLECTOR_THINKING_BUDGET = 1024

#: Extractors OM adds itself, in the order they run (§9.1).
BUILT_IN_SLUGS = ("current-task", "suggested-response", "thread-title")
WORKING_MEMORY_SLUG = "working-memory"
#: Slugs a user extractor may not take: the built-ins and the XML tags of OM's own formats.
RESERVED_SLUGS = frozenset({
    "observations", "observation", "extracted-values", "thread", "message", "messages",
    "conversation", "history", "system", "user", "assistant", "tool", *BUILT_IN_SLUGS,
})
_FORBIDDEN_PATH_SEGMENTS = frozenset({"__proto__", "constructor", "prototype"})


# --- problems ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """One configuration error: the documented option path and what is wrong plus the fix."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class OmConfigError(OmError, ValueError):
    """Raised by `load_om_config`; `problems` lists every error found."""

    def __init__(self, problems: tuple[Problem, ...] | list[Problem]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"invalid observationalMemory options:\n{lines}")


class _RuleViolations(OmError, ValueError):
    """The cross-option rules that failed; carried through pydantic to keep each path."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(map(str, problems)))


# --- numbers ----------------------------------------------------------------------------------
def _js_round(x: float) -> int:
    """Math.round: halves go up (Python's round() would send 0.5 to the even neighbour)."""
    return math.floor(x + 0.5)


def _tidy(x: float) -> int | float:
    """Drop float noise (30000 * 0.2 = 6000.000000000001) and print whole numbers as ints."""
    r = round(x, 6)
    return int(r) if float(r).is_integer() else r


def _number(value: Any, hint: str) -> int | float:
    """A real, finite number (a bool is not one, nor NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number; {hint}")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{value} is not a usable number; {hint}")
    return value


def _whole(value: Any, hint: str, minimum: int) -> int:
    number = _number(value, hint)
    if not float(number).is_integer() or number < minimum:
        kind = "a positive whole number" if minimum > 0 else "a whole number >= 0"
        raise ValueError(f"must be {kind}, got {value!r}; {hint}")
    return int(number)


# --- models -----------------------------------------------------------------------------------
class _Options(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


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
        if name == "temperature" and (_number(setting, "use e.g. temperature = 0.3") < 0):
            raise ValueError(f"temperature must be >= 0, got {setting}; use e.g. temperature = 0.3")
        if name == "maxOutputTokens":
            setting = _whole(setting, "use e.g. maxOutputTokens = 100000", 1)
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


class ModelWithRetries(_Options):
    """One entry of a fallback list: tried in order, each with its own retries and settings."""

    id: str | None = None
    model: ModelName
    max_retries: int | None = None
    enabled: bool = True
    model_settings: ModelSettings = {}
    provider_options: ProviderOptions | None = None
    headers: dict[str, str] = {}

    @field_validator("max_retries", mode="before")
    @classmethod
    def _retries(cls, value: Any) -> int | None:
        if value is None:
            return None
        return _whole(value, "use e.g. maxRetries = 2, or leave it out", 0)


def _fallbacks(value: tuple[ModelWithRetries, ...]) -> tuple[ModelWithRetries, ...]:
    if not value:
        raise ValueError("an empty model list names no model; list at least one {model = '...'} "
                         "entry, or give a single model name")
    if not any(entry.enabled for entry in value):
        raise ValueError("every entry of the model list is disabled; set enabled = true on at "
                         "least one entry")
    return value


class ModelByInputTokens(_Options):
    """Pick the model by the size of the call: `upTo = {"10000" = "small", "40000" = "big"}`.

    Limits are inclusive upper bounds of input tokens; a call above the largest limit fails.
    """

    up_to: dict[int | float, ModelName]

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
    return _tidy(limit) if math.isfinite(limit) and limit > 0 else None


_MODEL_TAGS = ("model-name", "model-with-retries", "model-by-input-tokens")


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


def _spec_supports_temperature(spec: ModelSpec | None) -> bool:
    if isinstance(spec, ModelByInputTokens):
        return all(model_supports_temperature(model_name(m)) for m in spec.up_to.values())
    return model_supports_temperature(model_name(spec))


def _is_default_choice(spec: ModelSpec | None) -> bool:
    """Unset, `'default'` or a router: the choices that get the 100 000 maxOutputTokens default."""
    return spec is None or spec == "default" or isinstance(spec, ModelByInputTokens)


# --- references (hooks, schemas) --------------------------------------------------------------
_REFERENCE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


def _reference(value: str) -> str:
    if not _REFERENCE.match(value.strip()):
        raise ValueError(f"{value!r} is not a reference to Python code; write it as "
                         "'package.module:function' (module path, a colon, then the name)")
    return value.strip()


#: `"package.module:attribute"`: checked for shape at load, imported only by `load_reference`.
Reference = Annotated[str, AfterValidator(_reference)]


def load_reference(reference: str) -> Any:
    """Import `"package.module:attr.sub"` and return the object; ValueError says what is missing."""
    module_name, _, attribute = _reference(reference).partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} for {reference!r} ({exc}); "
                         "check the module is installed and on PYTHONPATH") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{module_name!r} has no {attribute!r} (from {reference!r}); "
                             "check the name after the colon")
        target = getattr(target, part)
    return target


class HooksConfig(_Options):
    """Lifecycle hooks (§13) as `"module:function"` references; `load()` imports them."""

    on_observation_start: Reference | None = None
    on_observation_end: Reference | None = None
    on_reflection_start: Reference | None = None
    on_reflection_end: Reference | None = None

    def references(self) -> dict[str, str]:
        """The hooks that are set, by their documented (camelCase) names."""
        return {to_camel(name): ref for name, ref in self if ref is not None}

    def load(self) -> dict[str, Callable[..., Any]]:
        """Import every hook; ValueError if one cannot be imported or is not callable."""
        loaded = {name: load_reference(ref) for name, ref in self.references().items()}
        for name, hook in loaded.items():
            if not callable(hook):
                raise ValueError(f"hooks.{name}: {self.references()[name]!r} is not a function; "
                                 "point it at a callable")
        return loaded


# --- extractors -------------------------------------------------------------------------------
_SLUG = re.compile(r"^[a-z](?:[a-z0-9-]*[a-z0-9])?$")


def slugify(name: str) -> str:
    """An extractor's slug (§9.1): lowercase; letters and digits kept; quotes and backticks
    dropped; every other run of characters becomes one `-`, never leading or trailing."""
    out: list[str] = []
    gap = False
    for ch in name.lower():
        if ch in "'\"`":
            continue
        if "a" <= ch <= "z" or "0" <= ch <= "9":
            if gap and out:
                out.append("-")
            gap = False
            out.append(ch)
        else:
            gap = True
    return "".join(out)


def _json_schema(value: Any) -> Any:
    if value is None or isinstance(value, str) or callable(value):
        return value  # a reference, a pydantic class, or a function of the runtime context
    if not isinstance(value, Mapping):
        raise ValueError(f"{value!r} is not a schema; give a JSON Schema object such as "
                         "{type = 'object', properties = {...}} or a 'module:PydanticModel' reference")
    kind = value.get("type")
    names = {"object", "array", "string", "number", "integer", "boolean", "null"}
    if kind is not None and not set([kind] if isinstance(kind, str) else kind) <= names:
        raise ValueError(f"JSON Schema type {kind!r} is unknown; use one of {sorted(names)}")
    return value


def _code_name(value: Any) -> Any:
    """Code given from Python, named by its import path, so the options still have a digest."""
    return f"{value.__module__}:{value.__qualname__}" if callable(value) else value


class ExtractorConfig(_Options):
    """A value OM extracts during observation or reflection (§9), kept in thread metadata.

    Without `schema` it is *inline* (a `<slug>` block in the model's answer); with one it is
    *structured* (a follow-up call); `mode = "hook"` only calls `onExtracted`.
    """

    name: str
    #: Text, or (from Python) a function of the runtime context `{source, threadId, resourceId}`;
    #: in a file, a space-free `"module:function"` string is such a function's reference.
    instructions: str | Callable[..., Any] | None = None
    schema_: Annotated[dict[str, Any] | Reference | Callable[..., Any] | None,
                       BeforeValidator(_json_schema)] = Field(None, alias="schema")
    include_previous_extraction: bool = True
    metadata_key_path: str | Literal[False] | None = None
    mode: Literal["hook"] | None = None
    on_extracted: Reference | Callable[..., Any] | None = None
    retry_structured_extraction_on_empty_object: bool = False

    _code_by_name = field_serializer("instructions", "schema_", "on_extracted")(
        lambda self, value: _code_name(value))

    @field_validator("name")
    @classmethod
    def _slug_rules(cls, name: str) -> str:
        slug = slugify(name)
        if not slug:
            raise ValueError(f"{name!r} has no letters or digits to make a slug from; give the "
                             "extractor a name such as 'User profile'")
        if not _SLUG.match(slug):
            raise ValueError(f"{name!r} gives the slug {slug!r}, which must start with a letter; "
                             "rename the extractor so its name starts with a letter")
        if slug in RESERVED_SLUGS:
            raise ValueError(f"{name!r} gives the reserved slug {slug!r} (reserved: "
                             f"{', '.join(sorted(RESERVED_SLUGS))}); choose another name")
        return name

    @field_validator("metadata_key_path")
    @classmethod
    def _key_path(cls, path: str | Literal[False] | None) -> str | Literal[False] | None:
        if not isinstance(path, str):
            return path
        segments = path.split(".")
        if any(not s for s in segments):
            raise ValueError(f"{path!r} has an empty segment; write dot-separated names such as "
                             "'extracted.profile', or false to not store the value")
        bad = _FORBIDDEN_PATH_SEGMENTS.intersection(segments)
        if bad:
            raise ValueError(f"{path!r} uses the forbidden segment {sorted(bad)[0]!r} "
                             "(__proto__, constructor and prototype are refused); rename it")
        return path

    @model_validator(mode="after")
    def _mode_rules(self) -> ExtractorConfig:
        if self.mode == "hook":
            if self.on_extracted is None:
                raise ValueError("mode 'hook' needs onExtracted = 'module:function'; add it, or "
                                 "remove mode to extract with instructions")
            if self.instructions is not None or self.schema_ is not None:
                raise ValueError("a mode 'hook' extractor takes no instructions or schema; remove "
                                 "them, or remove mode to extract with instructions")
        elif not callable(self.instructions) and not (self.instructions or "").strip():
            raise ValueError(f"extractor {self.name!r} needs instructions (what to extract and "
                             "when to update it); add instructions = '...'")
        return self

    @property
    def slug(self) -> str:
        return slugify(self.name)

    @property
    def key_path(self) -> str | None:
        """Where the value is stored in the thread's OM metadata; None when not stored."""
        if self.metadata_key_path is False:
            return None
        return self.metadata_key_path or f"extracted.{self.slug}"

    @property
    def kind(self) -> Literal["inline", "structured", "hook"]:
        return "hook" if self.mode == "hook" else "structured" if self.schema_ is not None else "inline"

    def load_schema(self) -> Any:
        """The JSON Schema object, or the imported class a `module:Model` reference names."""
        return load_reference(self.schema_) if isinstance(self.schema_, str) else self.schema_


def _unique_slugs(extractors: tuple[ExtractorConfig, ...]) -> tuple[ExtractorConfig, ...]:
    seen: dict[str, str] = {}
    for extractor in extractors:
        if extractor.slug in seen:
            raise ValueError(f"{seen[extractor.slug]!r} and {extractor.name!r} both give the slug "
                             f"{extractor.slug!r}; rename one of them")
        seen[extractor.slug] = extractor.name
    return extractors


Extractors = Annotated[tuple[ExtractorConfig, ...], AfterValidator(_unique_slugs)]


# --- small option objects ---------------------------------------------------------------------
class ContinuationHints(_Options):
    """Which built-in hint extractors run; an omitted one stays on."""

    current_task: bool = True
    suggested_response: bool = True

    def __bool__(self) -> bool:
        # `if hints:` reads "does any hint run", the same question as for the plain `true`.
        return self.current_task or self.suggested_response


class RetrievalConfig(_Options):
    vector: bool = False
    scope: Literal["thread", "resource"] = "resource"
    instructions: str | None = None


def _idle(value: Any) -> Any:
    parse_activate_after_idle(value)
    return value.strip() if isinstance(value, str) else value


#: `activateAfterIdle` as written: ms, a duration string, `'auto'` or false (see schemas.durations).
IdleOption = Annotated[int | float | Literal[False] | str | None, BeforeValidator(_idle)]

_ATTACHMENT_PATTERN = re.compile(r"^(?:\*|[\w.+-]+/(?:\*|[\w.+-]+))$")
_ATTACHMENT_HINT = ("use true, false, 'auto', or a list of mime patterns such as "
                    "['image/*', 'application/pdf', '*']")


def _attachments(value: Any) -> Any:
    if isinstance(value, bool) or value == "auto":
        return value
    if isinstance(value, str):
        raise ValueError(f"{value!r} is not a setting; {_ATTACHMENT_HINT}")
    if isinstance(value, (list, tuple)):
        bad = [p for p in value if not isinstance(p, str) or not _ATTACHMENT_PATTERN.match(p)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a mime pattern; {_ATTACHMENT_HINT}")
        return tuple(value)
    raise ValueError(f"{value!r} is not a setting; {_ATTACHMENT_HINT}")


def _hint_for(defaults: dict[str, Any], info: ValidationInfo) -> str:
    return f"use e.g. {defaults[info.field_name]} (the default), or leave it out"


# --- observation and reflection ---------------------------------------------------------------
_OBSERVATION_COUNTS = {"message_tokens": 30_000, "max_tokens_per_batch": 10_000}
_BUFFER_TOKENS_HINT = ("use a ratio of messageTokens in (0, 1) such as 0.2, a token count such as "
                       "5000, or false to turn async buffering off")
_ACTIVATION_HINT = ("use a ratio in (0, 1] such as 0.8 (the share of messages removed on "
                    "activation) or a token count >= 1000 to keep")
_BLOCK_AFTER_HINT = ("use a multiplier in [1, 100) of the threshold such as 1.2, or an absolute "
                     "token count >= 100")


def _block_after(value: Any) -> int | float | None:
    if value is None:
        return None
    number = _number(value, _BLOCK_AFTER_HINT)
    if number < 1:
        raise ValueError(f"{value} is below 1; {_BLOCK_AFTER_HINT}")
    return number


class ObservationConfig(_Options):
    """`observation`: when the Observer runs and how it is called."""

    model: ModelSpec | None = None
    instruction: str | None = None
    thread_title: bool = False
    extract: Extractors = ()
    manage_working_memory: bool = False
    observe_attachments: Annotated[
        bool | Literal["auto"] | tuple[str, ...], BeforeValidator(_attachments)] = True
    message_tokens: int = 30_000
    max_tokens_per_batch: int = 10_000
    model_settings: ModelSettings = {}
    provider_options: ProviderOptions | None = None
    buffer_tokens: int | float | Literal[False] = 0.2
    buffer_on_idle: bool = False
    buffer_activation: int | float = 0.8
    activate_after_idle: IdleOption = None
    activate_on_provider_change: bool | None = None
    block_after: int | float | None = None
    previous_observer_tokens: int | Literal[False] = 2_000
    continuation_hints: bool | ContinuationHints = True

    @field_validator("message_tokens", "max_tokens_per_batch", mode="before")
    @classmethod
    def _counts(cls, value: Any, info: ValidationInfo) -> int:
        return _whole(value, _hint_for(_OBSERVATION_COUNTS, info), 1)

    @field_validator("buffer_tokens", mode="before")
    @classmethod
    def _buffer_tokens(cls, value: Any) -> int | float | Literal[False]:
        if value is False:
            return False
        if value is True:
            raise ValueError(f"true is not a buffer size; {_BUFFER_TOKENS_HINT}")
        if _number(value, _BUFFER_TOKENS_HINT) <= 0:
            raise ValueError(f"must be above 0, got {value}; {_BUFFER_TOKENS_HINT}")
        return value

    @field_validator("buffer_activation", mode="before")
    @classmethod
    def _buffer_activation(cls, value: Any) -> int | float:
        number = _number(value, _ACTIVATION_HINT)
        if number <= 0:
            raise ValueError(f"must be above 0, got {value}; {_ACTIVATION_HINT}")
        if 1 < number < 1000:
            raise ValueError(f"{value} is neither a ratio in (0, 1] nor a token count >= 1000; "
                             f"{_ACTIVATION_HINT}")
        return number

    @field_validator("block_after", mode="before")
    @classmethod
    def _block_after(cls, value: Any) -> int | float | None:
        return _block_after(value)

    @field_validator("previous_observer_tokens", mode="before")
    @classmethod
    def _previous(cls, value: Any) -> int | Literal[False]:
        if value is False:
            return False
        return _whole(value, "use e.g. 2000, 0 to leave previous observations out, or false for no limit", 0)


class ReflectionConfig(_Options):
    """`reflection`: when the Reflector condenses the observations and how it is called."""

    model: ModelSpec | None = None
    instruction: str | None = None
    extract: Extractors = ()
    observation_tokens: int = 40_000
    model_settings: ModelSettings = {}
    provider_options: ProviderOptions | None = None
    buffer_activation: int | float = 0.5
    activate_after_idle: IdleOption = None
    activate_on_provider_change: bool = False
    block_after: int | float | None = None
    continuation_hints: bool | ContinuationHints = True

    @field_validator("observation_tokens", mode="before")
    @classmethod
    def _count(cls, value: Any) -> int:
        return _whole(value, "use e.g. 40000 (the default), or leave it out", 1)

    @field_validator("buffer_activation", mode="before")
    @classmethod
    def _buffer_activation(cls, value: Any) -> int | float:
        hint = "use a ratio of observationTokens in (0, 1] such as 0.5 (background reflection starts there)"
        number = _number(value, hint)
        if not 0 < number <= 1:
            raise ValueError(f"must be in (0, 1], got {value}; {hint}")
        return number

    @field_validator("block_after", mode="before")
    @classmethod
    def _block_after(cls, value: Any) -> int | float | None:
        return _block_after(value)


# --- working memory ------------------------------------------------------------------------------
#: The default markdown working memory (the shape of the original's default template).
WORKING_MEMORY_TEMPLATE = """# User Information
- **First Name**:
- **Last Name**:
- **Location**:
- **Occupation**:
- **Interests**:
- **Goals**:
- **Events**:
- **Facts**:
- **Projects**:"""


class WorkingMemoryConfig(_Options):
    """The per-thread working-memory document `observation.manageWorkingMemory` keeps.

    omstream keeps it with the memory's options (the original configures it on `Memory`):
    markdown following `template`, or, with `schema` (a JSON Schema object or a
    `"module:PydanticModel"` reference), a JSON object the Observer returns as a structured value.
    """

    template: str = WORKING_MEMORY_TEMPLATE
    schema_: Annotated[dict[str, Any] | Reference | Callable[..., Any] | None,
                       BeforeValidator(_json_schema)] = Field(None, alias="schema")

    _code_by_name = field_serializer("schema_")(lambda self, value: _code_name(value))


# --- the tree ---------------------------------------------------------------------------------
_TOKEN_COUNTER = re.compile(r"^(?:tokenx|tiktoken(?::[\w.-]+)?)$")


class OmConfig(_Options):
    """The whole `observationalMemory` tree. `resolved()` gives the effective numbers."""

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
        problems = _rule_problems(self)
        if problems:
            raise _RuleViolations(problems)
        return self

    @property
    def async_buffering(self) -> bool:
        """Buffering runs unless `bufferTokens` is false or the scope is `resource` (§2)."""
        return self.observation.buffer_tokens is not False and self.scope == "thread"

    @property
    def observer_model_spec(self) -> ModelSpec | None:
        """Top-level → observation → reflection (§2); None means the default model."""
        return _first_set(self.model, self.observation.model, self.reflection.model)

    @property
    def reflector_model_spec(self) -> ModelSpec | None:
        """Top-level → reflection → observation (§2); None means the default model."""
        return _first_set(self.model, self.reflection.model, self.observation.model)

    @property
    def observer_model(self) -> str:
        return model_name(self.observer_model_spec)

    @property
    def reflector_model(self) -> str:
        return model_name(self.reflector_model_spec)

    def resolved(self) -> ResolvedConfig:
        return _resolve(self)


def _first_set(*specs: ModelSpec | None) -> ModelSpec | None:
    return next((s for s in specs if s is not None), None)


# --- cross-option rules (§2) ------------------------------------------------------------------
def _explicit_buffering(om: OmConfig) -> bool:
    obs, refl = om.observation, om.reflection
    if "buffer_tokens" in obs.model_fields_set:
        return obs.buffer_tokens is not False
    return "buffer_activation" in obs.model_fields_set or "buffer_activation" in refl.model_fields_set


def _rule_problems(om: OmConfig) -> list[Problem]:
    obs, refl = om.observation, om.reflection
    problems: list[Problem] = []
    if om.model is not None and (obs.model is not None or refl.model is not None):
        problems.append(Problem("model", (
            "cannot be combined with observation.model or reflection.model; set the top-level "
            "model for both agents, or remove it and set the per-agent models")))
    if om.scope == "resource" and _explicit_buffering(om):
        problems.append(Problem("scope", (
            "Async buffering is not yet supported with scope: 'resource' (observation.bufferTokens, "
            "observation.bufferActivation or reflection.bufferActivation is set). Use scope: 'thread', "
            "or set observation: { bufferTokens: false } and remove the bufferActivation options to "
            "disable async buffering.")))
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


def _observation_buffer_problems(om: OmConfig) -> list[Problem]:
    obs = om.observation
    tokens = obs.message_tokens
    if not om.async_buffering:
        if obs.block_after is None:
            return []
        why = "scope is 'resource'" if om.scope == "resource" else "observation.bufferTokens is false"
        return [Problem("observation.blockAfter", (
            f"only applies with async buffering, which is off ({why}); remove blockAfter, or turn "
            "buffering on with observation.bufferTokens (e.g. 0.2) in thread scope"))]
    problems = []
    size = resolve_buffer_tokens(obs.buffer_tokens, tokens)
    if size is not None and not 1 <= size < tokens:
        problems.append(Problem("observation.bufferTokens", (
            f"{obs.buffer_tokens} resolves to {size} tokens, which must be at least 1 and below "
            f"observation.messageTokens ({tokens}); {_BUFFER_TOKENS_HINT}")))
    if obs.buffer_activation >= 1000 and obs.buffer_activation >= tokens:
        problems.append(Problem("observation.bufferActivation", (
            f"{obs.buffer_activation} tokens to keep after activation must be below "
            f"observation.messageTokens ({tokens}); lower it, or use a ratio in (0, 1] such as 0.8")))
    limit = resolve_block_after(obs.block_after, tokens)
    if limit is not None and limit < tokens:
        problems.append(Problem("observation.blockAfter", (
            f"{obs.block_after} resolves to {limit} tokens, below observation.messageTokens "
            f"({tokens}); use a multiplier >= 1 such as 1.2, or an absolute count >= {tokens}")))
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
    limit = resolve_block_after(refl.block_after, tokens)
    if limit is not None and limit < tokens:
        return [Problem("reflection.blockAfter", (
            f"{refl.block_after} resolves to {limit} tokens, below reflection.observationTokens "
            f"({tokens}); use a multiplier >= 1 such as 1.2, or an absolute count >= {tokens}"))]
    return []


# --- derived numbers (thresholds.ts) -----------------------------------------------------------
def resolve_buffer_tokens(value: float | Literal[False] | None, threshold: int) -> int | None:
    """`bufferTokens` in tokens: a ratio below 1 of the threshold (rounded), else absolute."""
    if value is None or value is False:
        return None
    return _js_round(threshold * value) if value < 1 else _tidy(value)


def resolve_block_after(value: float | None, threshold: int) -> int | None:
    """`blockAfter` in tokens: a multiplier in [1, 100) of the threshold (rounded), else absolute."""
    if value is None:
        return None
    return _js_round(value * threshold) if value < 100 else _tidy(value)


def resolve_retention_floor(activation: float, threshold: int) -> int | float:
    """Message tokens kept after activation: `threshold*(1-ratio)`, or the absolute value (>= 1000)."""
    if activation >= 1000:
        return _tidy(activation)
    return _tidy(threshold * (1 - min(max(activation, 0.0), 1.0)))


def resolve_activation_ratio(activation: float, threshold: int) -> float:
    """The share of the threshold removed on activation, in [0, 1]."""
    ratio = 1 - activation / threshold if activation >= 1000 else activation
    return _tidy(min(max(ratio, 0.0), 1.0))


# --- resolution -------------------------------------------------------------------------------
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


@dataclass(frozen=True)
class ResolvedObservation:
    model: ResolvedModel
    message_tokens: int
    max_threshold: int                   # messageTokens, or the shared budget with shareTokenBudget
    buffer_tokens: int | None            # None: async buffering off
    buffer_ramp_point: int | float | None
    min_buffer_tokens: int | float | None
    buffer_activation: int | float | None
    activation_ratio: float | None
    retention_floor: int | float | None
    block_after: int | None
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
    block_after: int | None
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

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with the documented camelCase names."""
        return _jsonable(self)


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


def _hints(value: bool | ContinuationHints) -> tuple[bool, bool]:
    if isinstance(value, ContinuationHints):
        return value.current_task, value.suggested_response
    return value, value


def _resolve_model(spec: ModelSpec | None, settings: dict[str, Any], provider_options: dict | None,
                   temperature: float, thinking_budget: int) -> ResolvedModel:
    defaults: dict[str, Any] = {}
    if _spec_supports_temperature(spec):
        defaults["temperature"] = temperature
    if _is_default_choice(spec):
        defaults["maxOutputTokens"] = DEFAULT_MAX_OUTPUT_TOKENS
    if provider_options is None:
        provider_options = {"google": {"thinkingConfig": {"thinkingBudget": thinking_budget}}}
    routing = ("by-input-tokens" if isinstance(spec, ModelByInputTokens)
               else "fallbacks" if isinstance(spec, tuple) else "single")
    return ResolvedModel(
        spec=model_name(spec) if routing == "single" else spec, name=model_name(spec),
        routing=routing, default_choice=_is_default_choice(spec),
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
        max_threshold=tokens + refl.observation_tokens if om.share_token_budget else tokens,
        buffer_tokens=size,
        buffer_ramp_point=_tidy(tokens - size * 1.1) if size is not None else None,
        min_buffer_tokens=_tidy(size / 2) if size is not None else None,
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
        buffer_start=_tidy(tokens * refl.buffer_activation) if buffering else None,
        block_after=(resolve_block_after(refl.block_after or DEFAULT_BLOCK_AFTER, tokens)
                     if buffering else None),
        activate_after_idle=parse_activate_after_idle(refl.activate_after_idle),
        activate_on_provider_change=refl.activate_on_provider_change,
        instruction=refl.instruction,
        current_task_hint=current_task,
        suggested_response_hint=suggested,
        extractors=builtins + tuple(e.slug for e in refl.extract),
    )


def _resolve(om: OmConfig) -> ResolvedConfig:
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
    )


# --- loading ----------------------------------------------------------------------------------
_OM_KEYS = ("observationalMemory", "observational_memory")


def _section(value: Any) -> Any:
    """The option object inside a whole settings file, or the value itself."""
    if isinstance(value, Mapping):
        for key in _OM_KEYS:
            if key in value:
                return _section(value[key])
        if set(value) == {"omstream"}:
            return None
    return value


def load_om_config(value: Any, *, only_supported: bool = True) -> OmConfig:
    """Options → a checked `OmConfig`; raises `OmConfigError` listing every problem.

    `None` (absent) → the defaults; `True` ≡ `{model = DEFAULT_MODEL}` (so, as in the original, no
    maxOutputTokens default applies, while `{}` gets one); `False` → disabled; an object may be
    the bare options, `{"observationalMemory": {...}}`, or a whole settings file.

    Every documented option is validated, but one the engine does not implement yet is refused
    (`only_supported`), so that no setting is accepted and then silently ignored.
    """
    value = _section(value)
    if value is None:
        return OmConfig()
    if value is True:
        return OmConfig(model=DEFAULT_MODEL)
    if value is False:
        return OmConfig(enabled=False)
    if not isinstance(value, Mapping):
        raise OmConfigError([Problem("observationalMemory", (
            f"{value!r} is not a setting; use true, false, or an object of options"))])
    try:
        om = OmConfig.model_validate(value)
    except ValidationError as exc:
        raise OmConfigError(_problems(exc)) from None
    problems = unsupported_problems(om) if only_supported else []
    if problems:
        raise OmConfigError(problems)
    return om


# --- options validated but not implemented yet ---------------------------------------------------
_NOT_YET = "is not supported yet; remove it (see the README's \"Not supported yet\" list)"


def unsupported_problems(om: OmConfig) -> list[Problem]:
    """A problem for each option set to a value whose behaviour the engine does not have yet.

    An option left at its default, or set to its "off" value, is fine: it asks for nothing.
    """
    obs, refl = om.observation, om.reflection
    asked = {
        "scope": om.scope == "resource",
        "retrieval": om.retrieval is not False,
        "obscureThreadIds": om.obscure_thread_ids is True,
        "observation.maxTokensPerBatch": "max_tokens_per_batch" in obs.model_fields_set,
    }
    problems = [Problem(path, _NOT_YET) for path, is_set in asked.items() if is_set]
    if om.scope == "resource":  # the one option whose value, not presence, is unsupported
        problems[0] = Problem("scope", f"'resource' {_NOT_YET}; use scope 'thread'")
    for path, spec in (("model", om.model), ("observation.model", obs.model),
                       ("reflection.model", refl.model)):
        problems += _unsupported_fallback_options(path, spec)
    return problems


def _unsupported_fallback_options(path: str, spec: ModelSpec | None) -> list[Problem]:
    """ModelWithRetries entries travel to the model agent by name only, so far."""
    if not isinstance(spec, tuple):
        return []
    return [Problem(f"{path}[{i}].{_OPTION_NAMES[name]}", _NOT_YET)
            for i, entry in enumerate(spec)
            for name in ("max_retries", "model_settings", "provider_options", "headers")
            if name in entry.model_fields_set]


def check_om_config(value: Any, *, only_supported: bool = True) -> tuple[Problem, ...]:
    """Every problem `load_om_config` would report; empty when the options are valid."""
    try:
        load_om_config(value, only_supported=only_supported)
    except OmConfigError as exc:
        return exc.problems
    return ()


def _option_names() -> dict[str, str]:
    """snake_case field name → documented name, for every model of the tree."""
    names: dict[str, str] = {}
    for model in (OmConfig, ObservationConfig, ReflectionConfig, ExtractorConfig, HooksConfig,
                  ModelWithRetries, ModelByInputTokens, ContinuationHints, RetrievalConfig):
        for name, info in model.model_fields.items():
            names[name] = info.alias or to_camel(name)
    return names


_OPTION_NAMES = _option_names()


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if part in _MODEL_TAGS:
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = _OPTION_NAMES.get(part, part)
            path += f".{name}" if path else name
    return path or "observationalMemory"


def _message(error: Any) -> str:
    kind, message = error["type"], error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        near = difflib.get_close_matches(key, set(_OPTION_NAMES.values()), n=1)
        guess = f"; did you mean {near[0]!r}?" if near else ""
        return f"is not an option here; remove it or correct its spelling{guess}"
    if kind == "missing":
        return "is required; add it"
    if kind.startswith("bool"):
        return f"must be true or false, got {error.get('input')!r}"
    return message


def _problems(exc: ValidationError) -> tuple[Problem, ...]:
    problems: list[Problem] = []
    for error in exc.errors():
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, _RuleViolations):
            problems.extend(cause.problems)
        else:
            problems.append(Problem(_path(error["loc"]), _message(error)))
    return tuple(problems)
