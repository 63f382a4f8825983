"""The "not supported yet" gate: options that validate but whose behaviour the engine lacks.

`load_om_config` refuses them (unless `only_supported=False`), so that no setting is accepted
and then silently ignored.
"""

from __future__ import annotations

from .models import ModelSpec
from .options import OPTION_NAMES, OmConfig
from .problems import Problem

__all__ = ["unsupported_problems"]

_NOT_YET = "is not supported yet; remove it (see docs/configuration.md, \"Not supported yet\")"


def unsupported_problems(om: OmConfig) -> list[Problem]:
    """A problem for each option set to a value whose behaviour the engine does not have yet.

    An option left at its default, or set to its "off" value, is fine: it asks for nothing.
    """
    obs, refl = om.observation, om.reflection
    problems: list[Problem] = []
    for path, spec in (("model", om.model), ("observation.model", obs.model),
                       ("reflection.model", refl.model)):
        problems += _unsupported_fallback_options(path, spec)
    return problems


def _unsupported_fallback_options(path: str, spec: ModelSpec | None) -> list[Problem]:
    """ModelWithRetries entries travel to the model agent by name only, so far."""
    if not isinstance(spec, tuple):
        return []
    return [Problem(f"{path}[{i}].{OPTION_NAMES[name]}", _NOT_YET)
            for i, entry in enumerate(spec)
            for name in ("max_retries", "model_settings", "provider_options", "headers")
            if name in entry.model_fields_set]
