"""The envelope: one content field encrypted and authenticated, as a JSON string.

    om1:<key id>:<nonce>:<ciphertext>      AES-256-GCM, a random 96-bit nonce (producers, edges)
    om1d:<key id>:<nonce>:<ciphertext>     AES-256-GCM-SIV, a nonce derived from a context (the
                                           worker's outputs: refolding rewrites the same bytes)

`nonce` and `ciphertext` (with its 16-byte tag) are base64url without padding.  The plaintext is
the field's JSON encoding, so a field of any JSON type (a string, a list of parts, a dict of tool
arguments) comes back with its type.  Why a string: every content field is replaced in place
inside the record's JSON, and a string is legal wherever a value is, passes every JSON codec and
producer unchanged, and names its key so a reader can find it in the key ring.

The associated data binds the ciphertext to `memory key` and `field path` (and the format and key
id): the same bytes pasted into another memory or another field fail as `Tampered`.

Why two modes.  A random nonce is the safe default where encryption happens once (a producer,
the intake).  The fold is pure and a refold must reproduce its outputs byte for byte, so what the
worker encrypts on the fold's behalf takes its nonce from a context that names the output (event
id, field): the same output gets the same bytes.  AES-GCM would be broken by a nonce repeated with
another plaintext (two memory versions write different text under the same event id and memory
key); AES-GCM-SIV is built for that case: a repeated nonce reveals only that two plaintexts are
equal, nothing else.
"""

from __future__ import annotations

import base64
import functools
import hmac
import os
from dataclasses import dataclass, field
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESGCMSIV
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import Tampered

__all__ = ["RANDOM", "SYNTHETIC", "DataKey", "Envelope", "is_sealed", "open_value", "parse", "seal_value"]

RANDOM = "om1"
SYNTHETIC = "om1d"
_FORMATS = (RANDOM, SYNTHETIC)
NONCE_BYTES = 12
KEY_BYTES = 32


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _subkey(key: bytes, label: bytes) -> bytes:
    return HKDF(SHA256(), KEY_BYTES, salt=None, info=b"omstream data key v1 " + label).derive(key)


@dataclass(frozen=True)
class DataKey:
    """One memory's data key: its id (in every envelope), memory key and the key material.

    Each mode gets a subkey of its own (HKDF), and the synthetic nonces a third, so no key is
    used by two algorithms."""

    key_id: str
    memory_key: str
    material: bytes = field(repr=False)
    _gcm: AESGCM = field(init=False, repr=False, compare=False)
    _siv: AESGCMSIV = field(init=False, repr=False, compare=False)
    _nonce_key: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.material) != KEY_BYTES:
            raise ValueError(f"a data key has {KEY_BYTES} bytes, got {len(self.material)}")
        object.__setattr__(self, "_gcm", AESGCM(_subkey(self.material, b"gcm")))
        object.__setattr__(self, "_siv", AESGCMSIV(_subkey(self.material, b"gcm-siv")))
        object.__setattr__(self, "_nonce_key", _subkey(self.material, b"nonce"))


@dataclass(frozen=True)
class Envelope:
    """A parsed `om1…` string."""

    fmt: str
    key_id: str
    nonce: bytes
    ciphertext: bytes


@functools.lru_cache(maxsize=4096)  # a batch seals many fields of few memories
def _associated(fmt: str, key_id: str, memory_key: str, path: str) -> bytes:
    # Length-prefixed parts: no memory key/path pair can be re-split into another.
    parts = [p.encode() for p in (fmt, key_id, memory_key, path)]
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def seal_value(value: Any, key: DataKey, path: str, *, context: bytes | None = None) -> str:
    """The envelope of `value` (any JSON) under `key`, bound to its memory and `path`.

    Without `context`: AES-GCM with a random nonce.  With one: AES-GCM-SIV with the nonce an
    HMAC of the context (deterministic: give a context naming the output, such as its event id)."""
    plain = orjson.dumps(value)
    if context is None:
        fmt, nonce = RANDOM, os.urandom(NONCE_BYTES)
        cipher: AESGCM | AESGCMSIV = key._gcm
    else:
        fmt, cipher = SYNTHETIC, key._siv
        nonce = hmac.digest(key._nonce_key, path.encode() + b"\x00" + context, "sha256")[:NONCE_BYTES]
    sealed = cipher.encrypt(nonce, plain, _associated(fmt, key.key_id, key.memory_key, path))
    return f"{fmt}:{key.key_id}:{_b64(nonce)}:{_b64(sealed)}"


def is_sealed(value: Any) -> bool:
    """Whether `value` has the form of an envelope (a cheap test: `parse` checks it all)."""
    return isinstance(value, str) and value.partition(":")[0] in _FORMATS and value.count(":") == 3


def parse(text: str) -> Envelope:
    """The envelope's parts; `Tampered` when it is not one."""
    try:
        fmt, key_id, nonce, ciphertext = text.split(":")
        if fmt not in _FORMATS or not key_id:
            raise ValueError(fmt)
        env = Envelope(fmt, key_id, _unb64(nonce), _unb64(ciphertext))
    except (ValueError, TypeError):
        raise Tampered("not an om1 envelope") from None
    if len(env.nonce) != NONCE_BYTES:
        raise Tampered("an om1 envelope with a nonce of the wrong size")
    return env


def open_value(env: Envelope, key: DataKey, memory_key: str, path: str) -> Any:
    """The value sealed in `env`; `Tampered` unless it authenticates for this memory and path."""
    if key.key_id != env.key_id:
        raise Tampered(f"envelope of key {env.key_id} opened with key {key.key_id}")
    cipher: AESGCM | AESGCMSIV = key._gcm if env.fmt == RANDOM else key._siv
    try:
        plain = cipher.decrypt(env.nonce, env.ciphertext, _associated(env.fmt, env.key_id, memory_key, path))
    except InvalidTag:
        raise Tampered(f"ciphertext of key {env.key_id} does not authenticate at {memory_key} {path}") from None
    return orjson.loads(plain)
