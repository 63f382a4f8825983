"""The base of every option object: options are data read from a file, checked once."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["Options"]


class Options(BaseModel):
    """Frozen (a loaded configuration is shared by every fold), strict about unknown keys (a typo
    must stop start-up, not be ignored), and read in camelCase or snake_case."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True,
        # The docstring under a field is the option's description: the generated configuration
        # reference (`reference.py`, the manual's reference/configuration.md) prints it.
        use_attribute_docstrings=True,
    )
