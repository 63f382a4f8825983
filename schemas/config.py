"""The `observationalMemory` option tree (spec §2), camelCase or snake_case keys.

`load_om_config(True)` gives the defaults; an object is validated with every rule this build
enforces, each error naming the option and the fix.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic import BaseModel

__all__ = ["DEFAULT_MODEL", "ObservationConfig", "OmConfig", "ReflectionConfig", "load_om_config"]

DEFAULT_MODEL = "google/gemini-2.5-flash"


class _Options(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class ObservationConfig(_Options):
    model: str | None = None
    message_tokens: int = Field(30_000, gt=0)
    buffer_tokens: float | Literal[False] = 0.2
    buffer_activation: float = 0.8
    block_after: float | None = None
    previous_observer_tokens: int | Literal[False] = 2_000
    model_settings: dict[str, Any] = {}
    provider_options: dict[str, Any] | None = None
    instruction: str | None = None
    continuation_hints: bool = True


class ReflectionConfig(_Options):
    model: str | None = None
    observation_tokens: int = Field(40_000, gt=0)
    buffer_activation: float = 0.5
    block_after: float | None = None
    model_settings: dict[str, Any] = {}
    provider_options: dict[str, Any] | None = None
    instruction: str | None = None


class OmConfig(_Options):
    enabled: bool = True
    model: str | None = None
    scope: Literal["thread", "resource"] = "thread"
    observation: ObservationConfig = ObservationConfig()
    reflection: ReflectionConfig = ReflectionConfig()
    # omstream options: which counter decides thresholds, and the zone dates are rendered in.
    token_counter: str = "tiktoken"
    time_zone: str = "UTC"

    @model_validator(mode="after")
    def _rules(self) -> OmConfig:
        if self.model and (self.observation.model or self.reflection.model):
            raise ValueError(
                "observationalMemory.model cannot be combined with observation.model or "
                "reflection.model: set the top-level model, or the per-agent models, not both"
            )
        buffer = self.observation.buffer_tokens
        if buffer is not False:
            absolute = round(self.observation.message_tokens * buffer) if buffer < 1 else buffer
            if buffer <= 0 or absolute >= self.observation.message_tokens:
                raise ValueError(
                    f"observation.bufferTokens ({buffer}) must be above 0 and resolve below "
                    f"observation.messageTokens ({self.observation.message_tokens}); lower it, "
                    "or set it to false to turn async buffering off"
                )
        return self

    @property
    def async_buffering(self) -> bool:
        return self.observation.buffer_tokens is not False

    @property
    def observer_model(self) -> str:
        return self.model or self.observation.model or self.reflection.model or DEFAULT_MODEL

    @property
    def reflector_model(self) -> str:
        return self.model or self.reflection.model or self.observation.model or DEFAULT_MODEL


def load_om_config(value: bool | dict[str, Any] | None) -> OmConfig:
    """`True`/`None` → defaults; `False` → disabled; a dict → validated options."""
    if value is None or value is True:
        return OmConfig()
    if value is False:
        return OmConfig(enabled=False)
    if "observationalMemory" in value or "observational_memory" in value:
        value = value.get("observationalMemory", value.get("observational_memory"))
        return load_om_config(value)
    return OmConfig.model_validate(value)
