"""The embedder interface: `Embedder`, its `Vectors`, `normalise`, `EmbedderError`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from omstream.schemas.errors import OmError

__all__ = ["Embedder", "EmbedderError", "Vectors", "normalise"]

#: One row per text, float32, unit length.
Vectors: TypeAlias = npt.NDArray[np.float32]


class EmbedderError(OmError, ValueError):
    """An embedder that cannot be made or did not answer (the reason says which and why)."""


class Embedder(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors: ...


def normalise(rows: npt.ArrayLike) -> Vectors:
    """Rows scaled to unit length (a zero row stays zero), as float32."""
    array = np.asarray(rows, dtype=np.float32)
    if array.ndim == 1:
        array = array.reshape(1, -1)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    out: Vectors = np.divide(array, norms, out=np.zeros_like(array), where=norms > 0)
    return out
