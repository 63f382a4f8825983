"""omstream: Observational Memory for LLM agents, as an event-sourced Kafka stream processor.

The public API is small; everything else lives in subpackages (`omstream.engine` is the pure
fold, `omstream.schemas` the wire contract, `omstream.projections` the read side). Names are
loaded on first use so that importing the pure engine never pulls in Kafka clients or litellm.

The one thing done at start-up, before any part of the package runs (the pure engine included):
tiktoken is pointed at the encoding files litellm's wheel ships (`TIKTOKEN_CACHE_DIR`, unless it
is set already), so counting tokens never downloads.  The engine reads and writes no environment.
"""
from __future__ import annotations

import os
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "OmClient": "omstream.client",
    "ThreadMemory": "omstream.client",
    "Message": "omstream.schemas.messages",
    "OmConfig": "omstream.schemas.config",
    "load_om_config": "omstream.schemas.config",
    "Settings": "omstream.settings",
    "load_settings": "omstream.settings",
    "simulate": "omstream.conversations.simulation",
}


def _bundled_tiktoken_files() -> None:
    """Set `TIKTOKEN_CACHE_DIR` (and `CUSTOM_TIKTOKEN_CACHE_DIR`, which litellm reads) to the
    encoding files in litellm's wheel, found without importing litellm; an existing setting wins."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return
    spec = find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    if folder.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
        os.environ.setdefault("CUSTOM_TIKTOKEN_CACHE_DIR", str(folder))


_bundled_tiktoken_files()

__all__ = ["Message", "OmClient", "OmConfig", "Settings", "ThreadMemory", "load_om_config", "load_settings",
           "simulate"]

if TYPE_CHECKING:  # pragma: no cover
    from omstream.client import OmClient, ThreadMemory
    from omstream.conversations.simulation import simulate
    from omstream.schemas.config import OmConfig, load_om_config
    from omstream.schemas.messages import Message
    from omstream.settings import Settings, load_settings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'omstream' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
