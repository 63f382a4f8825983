"""`hooks`: the lifecycle hooks of spec §13, as `"module:function"` references."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic.alias_generators import to_camel

from .base import Options
from .references import Reference, load_reference

__all__ = ["HooksConfig"]


class HooksConfig(Options):
    """Lifecycle hooks (§13) as `"module:function"` references; `load()` imports them."""

    on_observation_start: Reference | None = None
    """Called when an observation's model job starts (`observe`, `buffer`), with
    `{threadId, resourceId, trigger}`."""
    on_observation_end: Reference | None = None
    """Called when an observation's model job ends: the start payload plus `usage`
    (`{inputTokens, outputTokens, totalTokens}`) and `providerMetadata` when the model reported
    them, and `error` when the job failed."""
    on_reflection_start: Reference | None = None
    """Called when a reflection's model job starts, with `{threadId, resourceId, trigger}`."""
    on_reflection_end: Reference | None = None
    """Called when a reflection's model job ends, with the payload of `onObservationEnd`."""

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
