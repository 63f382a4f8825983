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
    suggested_response: bool = True

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
