"""Token counting: two interchangeable counters with the original's overheads.

`tokenx` reproduces the estimator the original uses (tokenx 1.3.0, for parity runs); `tiktoken`
counts exactly with `o200k_base` (the default).  Both add 3.8 tokens per message and 24 per
conversation, so thresholds mean the same under either.  Counts are taken once, at ingest, and
carry the counter's name.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from schemas.messages import Message

__all__ = [
    "TOKENS_PER_CONVERSATION",
    "TOKENS_PER_MESSAGE",
    "Counter",
    "TiktokenCounter",
    "TokenxCounter",
    "count_message",
    "count_messages",
    "get_counter",
]

TOKENS_PER_MESSAGE = 3.8
TOKENS_PER_CONVERSATION = 24


class Counter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


# --- tokenx 1.3.0 -----------------------------------------------------------------------------
_CJK = re.compile(
    "[\u4e00-\u9fff\u3400-\u4dbf\u3000-\u303f\uff00-\uffef\u30a0-\u30ff\u2e80-\u2eff\u31c0-\u31ef"
    "\u3200-\u32ff\u3300-\u33ff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\ud7b0-\ud7ff]"
)
_PUNCT = r"[.,!?;(){}\[\]<>:/\\|@#$%^&*+=`~_-]"
_SPLIT = re.compile(rf"(\s+|{_PUNCT}+)")
_PUNCT_ANY = re.compile(_PUNCT)
_NUMERIC = re.compile(r"^[0-9]+(?:[.,][0-9]+)*$")
_WHITESPACE = re.compile(r"^\s+$")
_LANGUAGES = (
    (re.compile("[äöüßẞ]", re.IGNORECASE), 3.0),
    (re.compile("[éèêëàâîïôûùüÿçœæáíóúñ]", re.IGNORECASE), 3.0),
    (re.compile("[ąćęłńóśźżěščřžýůúďťň]", re.IGNORECASE), 3.5),
)


def _js_length(segment: str) -> int:
    """`String.prototype.length`: UTF-16 code units, so an emoji counts 2."""
    return len(segment) + sum(1 for ch in segment if ord(ch) > 0xFFFF)


def _segment_tokens(segment: str) -> int:
    if _WHITESPACE.match(segment):
        return 0
    if _CJK.search(segment):
        return len(segment)
    if _NUMERIC.match(segment):
        return 1
    length = _js_length(segment)
    if length <= 3:
        return 1
    if _PUNCT_ANY.search(segment):
        return math.ceil(length / 2)
    for pattern, chars_per_token in _LANGUAGES:
        if pattern.search(segment):
            return math.ceil(length / chars_per_token)
    return math.ceil(length / 6)


class TokenxCounter:
    """The tokenx heuristic estimator, segment by segment."""

    name = "tokenx"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return sum(_segment_tokens(s) for s in _SPLIT.split(text) if s)


# --- tiktoken ---------------------------------------------------------------------------------
def _offline_tiktoken_cache() -> None:
    """Point tiktoken at the encoding files litellm's wheel ships, so nothing is downloaded."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    if folder.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
        os.environ.setdefault("CUSTOM_TIKTOKEN_CACHE_DIR", str(folder))


class TiktokenCounter:
    """Exact BPE counts with tiktoken (`o200k_base` by default)."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        _offline_tiktoken_cache()
        import tiktoken

        self._encoding = tiktoken.get_encoding(encoding)
        self.name = f"tiktoken:{encoding}"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode(text, disallowed_special=()))


@lru_cache(maxsize=None)
def get_counter(name: str) -> Counter:
    """`tokenx`, `tiktoken` (o200k_base) or `tiktoken:<encoding>`."""
    if name == "tokenx":
        return TokenxCounter()
    if name == "tiktoken":
        return TiktokenCounter()
    if name.startswith("tiktoken:"):
        return TiktokenCounter(name.split(":", 1)[1])
    raise ValueError(f"unknown token counter {name!r}: use 'tiktoken' or 'tokenx'")


# --- messages ---------------------------------------------------------------------------------
def count_message(message: Message, counter: Counter) -> int:
    """Tokens of one message: role + payload + the per-message overhead, rounded."""
    payload = counter.count(message.role)
    if isinstance(message.content, str):
        payload += counter.count(message.content)
    else:
        for part in message.content:
            if part.type.startswith("data-") or part.type == "reasoning":
                continue
            if part.type == "text":
                payload += counter.count(part.text or "")
            else:
                payload += counter.count(part.model_dump_json(by_alias=True, exclude_none=True))
    return round(payload + TOKENS_PER_MESSAGE)


def count_messages(counts: list[int]) -> int:
    """A conversation of messages with these counts: their sum plus the conversation overhead."""
    return TOKENS_PER_CONVERSATION + sum(counts) if counts else 0
