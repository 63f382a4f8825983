"""Whether a model takes images and files as input: what `observeAttachments = "auto"` asks.

Three tables answer, by model name alone, so the fold decides the same in every run:

- `scripted/<name>`: the scripted provider's own table (`scripted.takes_attachments`);
- `local/<name>`: the offline models this project ships are text-only llama.cpp builds (no
  vision projector is loaded), so they take text only;
- anything else: litellm's model table (`supports_vision`), the copy bundled with the pinned
  litellm (`LITELLM_LOCAL_MODEL_COST_MAP`, set before litellm is imported, as `calls` does), never
  one fetched at run time.  A model in the table that does not declare vision takes text only
  (litellm's own reading, and what text-only endpoints such as DeepSeek's look like there); a
  model litellm does not know, or a lookup that fails, is unknown (None).

Each name is looked up once per process: litellm takes seconds to import, and the fold asks at
every observer request with attachments.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache

from . import local, scripted
from .calls import litellm_model_name

__all__ = ["litellm_vision", "takes_attachments"]


def takes_attachments(model: str, *, vision: Callable[[str], bool | None] | None = None) -> bool | None:
    """True when `model` takes image input, False when it takes text only, None when unknown.
    `vision` reads litellm's table (default: `litellm_vision`, in this process)."""
    if model.startswith("scripted/"):
        return scripted.takes_attachments(model)
    if local.is_local(model):
        return False
    return (vision or litellm_vision)(model)


@cache
def litellm_vision(model: str) -> bool | None:
    """litellm's answer for `model` (an original `google/...` name is read as `gemini/...`)."""
    model = litellm_model_name(model)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    try:
        import litellm

        litellm.suppress_debug_info = True  # no "Provider List" banner for an unknown provider
        litellm.get_model_info(model)  # raises for a model the table does not have
        return bool(litellm.supports_vision(model))
    except Exception:  # noqa: BLE001 - not in the table, or unreadable: the capability is unknown
        return None
