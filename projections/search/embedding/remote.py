"""Any litellm embedding model (`openai/text-embedding-3-small`, `gemini/text-embedding-004`, ...),
with the provider's key from the environment, as the model calls take theirs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import EmbedderError, Vectors, normalise

__all__ = ["LiteLLMEmbedder"]


class LiteLLMEmbedder:
    """`dim` is known after the first call (or given): the index name carries it."""

    def __init__(self, model: str, dim: int | None = None, **options: Any) -> None:
        self._model, self._dim, self._options = model, dim, options

    @property
    def name(self) -> str:
        return self._model

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise EmbedderError(f"embedder {self._model}: its dimension is known after a first call (see `probe`)")
        return self._dim

    async def probe(self) -> int:
        """Embed one word to learn the dimension."""
        await self.embed(["dimension"])
        return self.dim

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        if not texts:
            empty: Vectors = np.zeros((0, self._dim or 0), dtype=np.float32)
            return empty
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
        import litellm  # seconds to import: only when a remote embedder is configured

        try:
            response = await litellm.aembedding(model=self._model, input=list(texts), **self._options)
        except Exception as exc:  # the provider's errors are many classes; the reason is kept
            raise EmbedderError(f"embedder {self._model}: {exc}") from exc
        rows = normalise([item["embedding"] for item in response.data])
        self._dim = rows.shape[1]
        return rows
