"""Options from a file → a checked `OmConfig`, or every problem found at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from .models import DEFAULT_MODEL
from .options import OmConfig
from .problems import OmConfigError, Problem
from .pydantic_errors import validation_problems

__all__ = ["check_om_config", "load_om_config"]

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


def load_om_config(value: Any) -> OmConfig:
    """Options → a checked `OmConfig`; raises `OmConfigError` listing every problem.

    `None` (absent) → the defaults; `True` ≡ `{model = DEFAULT_MODEL}` (so, as in the original, no
    maxOutputTokens default applies, while `{}` gets one); `False` → disabled; an object may be
    the bare options, `{"observationalMemory": {...}}`, or a whole settings file.
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
        return OmConfig.model_validate(value)
    except ValidationError as exc:
        raise OmConfigError(validation_problems(exc)) from None


def check_om_config(value: Any) -> tuple[Problem, ...]:
    """Every problem `load_om_config` would report; empty when the options are valid."""
    try:
        load_om_config(value)
    except OmConfigError as exc:
        return exc.problems
    return ()
