"""The `observationalMemory` option tree (spec §2, §9.1, §13), read from a file, checked at load.

Every documented option exists here, in camelCase or snake_case, and every rule of §2 is checked
when the configuration is loaded, not when the first memory hits a threshold: a typo or an
impossible combination should stop `om worker` at start-up with a message that names the option
and says how to fix it, instead of surfacing hours later inside a fold. `load_om_config` raises
`OmConfigError` (a ValueError) listing every problem; `check_om_config` returns them.

Configuration comes from files, so everything that is code in the original is data here: a model
is a name, a fallback list or a router (`models`); lifecycle hooks and extractor callbacks are
`"package.module:function"` references, checked for shape at load and imported only by the
process that calls them (`references`, `hooks`); an extractor schema is a JSON Schema object or
a `"module:PydanticModel"` reference (`extractors`).

The modules, one concept each: `options` (the tree, `OmConfig`), `agents` (`observation`,
`reflection`), `models`, `extractors`, `references`, `hooks`, `working_memory`, `rules` (the
cross-option rules), `loading`, `problems` and
`pydantic_errors` (what a check reports), `numbers`, `base`.

`OmConfig` keeps the options as written (plus defaults).  The effective numbers of §2/§2.1
(absolute buffer sizes, ramp point, retention floor, block-after limits, per-agent model,
settings and provider options), which `om config check` prints, are the engine's:
`omstream.engine.rules.resolution.resolve`.
"""

from __future__ import annotations

from .agents import ContinuationHints, ObservationConfig, ReflectionConfig
from .extractors import BUILT_IN_SLUGS, RESERVED_SLUGS, ExtractorConfig, slugify
from .hooks import HooksConfig
from .loading import check_om_config, load_om_config
from .models import (
    DEFAULT_MODEL,
    ModelByInputTokens,
    ModelSpec,
    ModelWithRetries,
    model_name,
    model_supports_temperature,
)
from .options import OmConfig, RetrievalConfig
from .problems import OmConfigError, Problem
from .references import load_reference
from .working_memory import WorkingMemoryConfig

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
    "RetrievalConfig",
    "WorkingMemoryConfig",
    "check_om_config",
    "load_om_config",
    "load_reference",
    "model_name",
    "model_supports_temperature",
    "slugify",
]
