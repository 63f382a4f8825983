"""`observation` and `reflection`: when each agent runs and how it is called (spec §2)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ValidationInfo, field_validator

from ..durations import parse_activate_after_idle
from .base import Options
from .extractors import Extractors
from .models import ModelSettings, ModelSpec, ProviderOptions
from .numbers import number, whole

__all__ = [
    "BUFFER_TOKENS_HINT",
    "ContinuationHints",
    "IdleOption",
    "ObservationConfig",
    "ReflectionConfig",
]


class ContinuationHints(Options):
    """Which built-in hint extractors run; an omitted one stays on."""

    current_task: bool = True
    """The `current-task` extractor: what the agent is working on, kept in the thread's metadata
    and shown to the agent."""
    suggested_response: bool = True
    """The `suggested-response` extractor: how the agent might continue, kept and shown likewise."""

    def __bool__(self) -> bool:
        # `if hints:` reads "does any hint run", the same question as for the plain `true`.
        return self.current_task or self.suggested_response


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
    return f"use e.g. {defaults[str(info.field_name)]} (the default), or leave it out"


_OBSERVATION_COUNTS = {"message_tokens": 30_000, "max_tokens_per_batch": 10_000}
BUFFER_TOKENS_HINT = ("use a ratio of messageTokens in (0, 1) such as 0.2, a token count such as "
                      "5000, or false to turn async buffering off")
_ACTIVATION_HINT = ("use a ratio in (0, 1] such as 0.8 (the share of messages removed on "
                    "activation) or a token count >= 1000 to keep")
_BLOCK_AFTER_HINT = ("use a multiplier in [1, 100) of the threshold such as 1.2, or an absolute "
                     "token count >= 100")


def _block_after(value: Any) -> int | float | None:
    if value is None:
        return None
    checked = number(value, _BLOCK_AFTER_HINT)
    if checked < 1:
        raise ValueError(f"{value} is below 1; {_BLOCK_AFTER_HINT}")
    return checked


class ObservationConfig(Options):
    """`observation`: when the Observer runs and how it is called."""

    model: ModelSpec | None = None
    """The Observer's model (a name, a fallback list or a router by input size); unset: the
    top-level `model`, else `reflection.model`, else `google/gemini-2.5-flash`."""
    instruction: str | None = None
    """Text appended to the Observer's system prompt under `=== CUSTOM INSTRUCTIONS ===`."""
    thread_title: bool = False
    """Add the built-in `thread-title` extractor: a proposed title of 3 characters or more that
    differs from the current one retitles the thread (`data-om-thread-update`), unless the title
    is pinned."""
    extract: Extractors = ()
    """Extractors: values the Observer pulls out of each observation besides its text (spec §9);
    their slugs must differ."""
    manage_working_memory: bool = False
    """Add the `working-memory` extractor: the Observer rewrites the thread's working-memory
    document (`workingMemory`)."""
    observe_attachments: Annotated[
        bool | Literal["auto"] | tuple[str, ...], BeforeValidator(_attachments)] = True
    """Which images and files of the observed messages the Observer model receives besides their
    placeholders: `true` all, `false` none, a list of mime patterns (`"image/*"`,
    `"application/pdf"`, `"*"`) those that match, `"auto"` all when the observer model takes image
    input by litellm's model table, none when it takes text only, all when the table does not
    know the model."""
    message_tokens: int = 30_000
    """The observation threshold: unobserved message tokens at which the Observer runs."""
    max_tokens_per_batch: int = 10_000
    """Resource scope: the threads of one observation are sent in batches of about this many
    tokens, one observer call per batch (a bigger thread is a batch alone)."""
    model_settings: ModelSettings = {}
    """Settings of the Observer's calls (`temperature`, `maxOutputTokens`, other keys passed on).
    By default temperature 0.3 when the model takes one, and `maxOutputTokens` 100 000 when the
    model is unset, `"default"` or a router."""
    provider_options: ProviderOptions | None = None
    """Options per provider, passed to the Observer's calls; unset:
    `{google = {thinkingConfig = {thinkingBudget = 215}}}`.  Given, it replaces that default
    whole."""
    buffer_tokens: int | float | Literal[False] = 0.2
    """Async buffering: observe in the background every this many new message tokens before the
    threshold.  Below 1 a ratio of `messageTokens` (0.2 is 6 000 of 30 000), 1 or more a token
    count below `messageTokens`; `false` turns all async buffering off (observation and
    reflection)."""
    buffer_on_idle: bool = False
    """Buffer the unobserved messages in the background at the end of every turn."""
    buffer_activation: int | float = 0.8
    """How much activation removes from the context: up to 1 the share of the threshold's
    messages replaced by their buffered observations (0.8 keeps 6 000 of 30 000 tokens), 1 000 or
    more the message tokens to keep (below `messageTokens`)."""
    activate_after_idle: IdleOption = None
    """As the top-level `activateAfterIdle`, for observations; unset: the top-level value."""
    activate_on_provider_change: bool | None = None
    """As the top-level `activateOnProviderChange`, for observations; unset: the top-level value."""
    block_after: int | float | None = None
    """The safety net of async buffering: when the unobserved tokens are still at or above it
    after activation, a blocking observation runs.  From 1 to below 100 a multiplier of
    `messageTokens`, 100 or more a token count (greater than `messageTokens`); unset: 1.2 with
    buffering on.  Needs `bufferTokens`."""
    previous_observer_tokens: int | Literal[False] = 2_000
    """How many tokens of the previous observations the Observer is shown: a tail of recent lines
    plus the newest important ones (🔴, ✅) that fit, hidden runs marked, after a buffered
    reflection not activated yet has taken the place of the lines it covers; 0: none, `false`:
    all of them, as they are."""
    continuation_hints: bool | ContinuationHints = True
    """The built-in hint extractors (`current-task`, `suggested-response`): `true` both, `false`
    neither, or a table choosing each."""

    @field_validator("message_tokens", "max_tokens_per_batch", mode="before")
    @classmethod
    def _counts(cls, value: Any, info: ValidationInfo) -> int:
        return whole(value, _hint_for(_OBSERVATION_COUNTS, info), 1)

    @field_validator("buffer_tokens", mode="before")
    @classmethod
    def _buffer_tokens(cls, value: Any) -> int | float | Literal[False]:
        if value is False:
            return False
        if value is True:
            raise ValueError(f"true is not a buffer size; {BUFFER_TOKENS_HINT}")
        size = number(value, BUFFER_TOKENS_HINT)
        if size <= 0:
            raise ValueError(f"must be above 0, got {value}; {BUFFER_TOKENS_HINT}")
        return size

    @field_validator("buffer_activation", mode="before")
    @classmethod
    def _buffer_activation(cls, value: Any) -> int | float:
        activation = number(value, _ACTIVATION_HINT)
        if activation <= 0:
            raise ValueError(f"must be above 0, got {value}; {_ACTIVATION_HINT}")
        if 1 < activation < 1000:
            raise ValueError(f"{value} is neither a ratio in (0, 1] nor a token count >= 1000; "
                             f"{_ACTIVATION_HINT}")
        return activation

    @field_validator("block_after", mode="before")
    @classmethod
    def _block_after(cls, value: Any) -> int | float | None:
        return _block_after(value)

    @field_validator("previous_observer_tokens", mode="before")
    @classmethod
    def _previous(cls, value: Any) -> int | Literal[False]:
        if value is False:
            return False
        return whole(value, "use e.g. 2000, 0 to leave previous observations out, or false for no limit", 0)


class ReflectionConfig(Options):
    """`reflection`: when the Reflector condenses the observations and how it is called."""

    model: ModelSpec | None = None
    """The Reflector's model (a name, a fallback list or a router by input size); unset: the
    top-level `model`, else `observation.model`, else `google/gemini-2.5-flash`."""
    instruction: str | None = None
    """Text appended to the Reflector's system prompt under `=== CUSTOM INSTRUCTIONS ===`."""
    extract: Extractors = ()
    """Extractors: values the Reflector pulls out of each reflection besides its text (spec §9);
    their slugs must differ."""
    observation_tokens: int = 40_000
    """The reflection threshold: observation tokens at which the Reflector condenses them."""
    model_settings: ModelSettings = {}
    """Settings of the Reflector's calls (`temperature`, `maxOutputTokens`, other keys passed on).
    By default temperature 0 when the model takes one, and `maxOutputTokens` 100 000 when the
    model is unset, `"default"` or a router."""
    provider_options: ProviderOptions | None = None
    """Options per provider, passed to the Reflector's calls; unset:
    `{google = {thinkingConfig = {thinkingBudget = 1024}}}`.  Given, it replaces that default
    whole."""
    buffer_activation: int | float = 0.5
    """A ratio of `observationTokens` in (0, 1]: background reflection starts there (0.5: at
    20 000 tokens), with async buffering on."""
    activate_after_idle: IdleOption = None
    """Activate a buffered reflection once the thread has been idle this long: as the top-level
    `activateAfterIdle` (which applies to observations only)."""
    activate_on_provider_change: bool = False
    """Activate a buffered reflection when the actor's model differs from the one that last
    answered, as the top-level `activateOnProviderChange`."""
    block_after: int | float | None = None
    """Above it a blocking reflection runs when no buffered reflection could activate.  From 1 to
    below 100 a multiplier of `observationTokens`, 100 or more a token count (greater than
    `observationTokens`); unset: 1.2 with buffering on."""
    continuation_hints: bool | ContinuationHints = True
    """The built-in hint extractors of the Reflector (`current-task`, `suggested-response`):
    `true` both, `false` neither, or a table choosing each."""

    @field_validator("observation_tokens", mode="before")
    @classmethod
    def _count(cls, value: Any) -> int:
        return whole(value, "use e.g. 40000 (the default), or leave it out", 1)

    @field_validator("buffer_activation", mode="before")
    @classmethod
    def _buffer_activation(cls, value: Any) -> int | float:
        hint = "use a ratio of observationTokens in (0, 1] such as 0.5 (background reflection starts there)"
        activation = number(value, hint)
        if not 0 < activation <= 1:
            raise ValueError(f"must be in (0, 1], got {value}; {hint}")
        return activation

    @field_validator("block_after", mode="before")
    @classmethod
    def _block_after(cls, value: Any) -> int | float | None:
        return _block_after(value)
