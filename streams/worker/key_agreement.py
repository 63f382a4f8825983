"""Every worker of a namespace signs and checks model results with one key, or does not start.

A model result is folded by whichever fold worker owns its memory's partition when the result
arrives, which after a rebalance is rarely the process whose model agent answered.  A fold
worker whose key differs from the model agent's refuses the result as `forged-result`, and the
memory waits for its cycle's deadline: a fault that shows only once workers move.  So a worker
checks at start, before it joins its group, that its key is the namespace's.

The namespace's key is named by its fingerprint (`omstream.pipeline.signing.fingerprint`, never the key)
in the compacted registry `<ns>.versions` (record `result-key`).  The first worker to start
records its own; a later worker with another key stops with one line naming the setting.  Two
first workers with different keys may both record theirs: each reads the registry back after
writing, and the one whose record was not the last stops.  `om worker --adopt-key` records this
worker's key as the namespace's (to change keys: stop every worker, start one with the new key
and `--adopt-key`, then the others with the new key).
"""

from __future__ import annotations

from omstream.schemas.errors import OmError

from ..pipeline.signing import fingerprint
from ..settings import Settings
from ..versions.registry import read_registry, set_result_key

__all__ = ["ResultKeyMismatch", "agree_on_result_key"]


class ResultKeyMismatch(OmError):
    """This worker's result-signing key is not the one the namespace's workers use."""


async def agree_on_result_key(settings: Settings, key: bytes, *, adopt: bool = False) -> str:
    """Return how this worker's key stands (`recorded`, `agrees`, `adopted`); raise
    `ResultKeyMismatch` when another key is the namespace's."""
    mine = fingerprint(key)
    known = (await read_registry(settings)).result_key
    if known == mine and not adopt:
        return "agrees"
    if known is not None and not adopt:
        raise ResultKeyMismatch(_mismatch(settings, known, mine))
    await set_result_key(settings, mine)
    last = (await read_registry(settings)).result_key
    if last != mine:  # another worker recorded its own key at the same moment, after ours
        raise ResultKeyMismatch(_mismatch(settings, last or "none", mine))
    return "adopted" if known is not None else "recorded"


def _mismatch(settings: Settings, theirs: str, mine: str) -> str:
    where = ("OM_RESULT_KEY / omstream.result_key" if settings.result_key
             else f"no OM_RESULT_KEY / omstream.result_key, so the key of {settings.data_dir / 'result.key'}")
    return (f"the result-signing key differs from the one namespace {settings.namespace!r} uses "
            f"(fingerprint {mine[:12]}, the namespace's {theirs[:12]}; this worker has {where}): "
            f"give every worker of the namespace the same OM_RESULT_KEY (omstream.result_key), "
            f"or, with every other worker stopped, start this one with `om worker --adopt-key`")
