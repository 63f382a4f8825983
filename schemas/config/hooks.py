"""`hooks`: the lifecycle hooks of spec §13, as `"module:function"` references."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic.alias_generators import to_camel

from .base import Options
from .references import Reference, load_reference

__all__ = ["HooksConfig"]


class HooksConfig(Options):
    """Lifecycle hooks (§13) as `"module:function"` references; `load()` imports them.  Each
    fires once per cycle, whatever the cycle took (a regeneration, the reflector's compression
    ladder, a resource memory's parallel batches, structured extractors' follow-ups)."""

    on_observation_start: Reference | None = None
    """Called when an observation cycle starts (blocking or buffered), with
    `{threadId, resourceId, trigger}` (`resourceId` in every scope, when the thread has one)."""
    on_observation_end: Reference | None = None
    """Called when an observation cycle ends: the start payload plus `usage`
    (`{inputTokens, outputTokens, totalTokens}`, summed over every model call of the cycle) and
    `providerMetadata` (the last call's, with litellm's `cost` summed) when the models reported
    them, and `error` whenever the cycle failed (a failed call, an unreadable or looping answer,
    a superseded chunk, no model for its size)."""
    on_reflection_start: Reference | None = None
    """Called when a reflection cycle starts, with `{threadId, resourceId, trigger}`."""
    on_reflection_end: Reference | None = None
    """Called when a reflection cycle ends, with the payload of `onObservationEnd`."""

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
