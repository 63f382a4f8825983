"""A deterministic bag-of-words embedder for tests: no model, the same vector on every machine.

Each lower-cased word adds ±1 at a position chosen by its sha256, so texts sharing words are
near and a repeated run gives identical vectors (and so identical search results)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from .base import Vectors, normalise

__all__ = ["HashEmbedder"]

_WORD = re.compile(r"\w+")


class HashEmbedder:
    def __init__(self, dim: int = 64) -> None:
        if dim < 1:
            raise ValueError(dim)
        self._dim = dim

    @property
    def name(self) -> str:
        return f"hash/{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _row(self, text: str) -> np.ndarray:
        row = np.zeros(self._dim, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            digest = hashlib.sha256(word.encode()).digest()
            row[int.from_bytes(digest[:4], "big") % self._dim] += 1.0 if digest[4] & 1 else -1.0
        return row

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        return normalise(np.stack([self._row(t) for t in texts]) if texts else np.zeros((0, self._dim)))
