"""The namespace key: it wraps (encrypts) every data key of a namespace, and is never stored.

It comes from the settings: `[omstream] namespace_key` / `OM_NAMESPACE_KEY`, or a file named by
`namespace_key_file` (one key a line).  Several keys, separated by commas or one a line, rotate
it: the FIRST wraps new data keys, every one unwraps.  A key is any text of at least 32
characters (`python -c "import secrets; print(secrets.token_urlsafe(32))"`); the key-encryption
key is derived from it with HKDF, and a key is named only by its fingerprint (an HMAC of a fixed
label, no help to an attacker), which is what a wrapped record carries.

Rotation without downtime (see docs/forgetting.md): 1. give every process `OLD,NEW` (wrap with
old, accept both); 2. give them `NEW,OLD` and run `KeyRing.rewrap()`, which rewrites every data
key wrapped by OLD under NEW; compaction removes the old wrappings within the shred window;
3. drop OLD.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import NamespaceKeyError, Tampered

__all__ = ["MIN_KEY_CHARS", "NamespaceKeys", "namespace_keys"]

MIN_KEY_CHARS = 32
_FINGERPRINT_LABEL = b"omstream namespace-key fingerprint v1"


@dataclass(frozen=True)
class _Kek:
    fingerprint: str
    aead: AESGCM = field(repr=False)


def _kek(text: str) -> _Kek:
    secret = HKDF(SHA256(), 32, salt=None, info=b"omstream namespace key v1").derive(text.encode())
    fingerprint = hmac.new(secret, _FINGERPRINT_LABEL, hashlib.sha256).hexdigest()[:16]
    return _Kek(fingerprint, AESGCM(secret))


def _associated(key_id: str, memory_key: str, epoch: int) -> bytes:
    parts = [p.encode() for p in (key_id, memory_key, str(epoch))]
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


class NamespaceKeys:
    """The namespace keys of a process: the first wraps, all unwrap.  No repr of the secrets."""

    def __init__(self, texts: list[str]) -> None:
        texts = [t.strip() for t in texts if t.strip()]
        if not texts:
            raise NamespaceKeyError("no namespace key: set OM_NAMESPACE_KEY or namespace_key_file")
        short = [i for i, t in enumerate(texts) if len(t) < MIN_KEY_CHARS]
        if short:
            raise NamespaceKeyError(f"namespace key number {short[0] + 1} has fewer than {MIN_KEY_CHARS} "
                                    "characters; use `secrets.token_urlsafe(32)`")
        self._keks = [_kek(t) for t in texts]

    def __repr__(self) -> str:
        return f"NamespaceKeys(current={self.current}, accepted={len(self._keks)})"

    @property
    def current(self) -> str:
        """The fingerprint of the key that wraps."""
        return self._keks[0].fingerprint

    @property
    def fingerprints(self) -> tuple[str, ...]:
        return tuple(k.fingerprint for k in self._keks)

    def wrap(self, material: bytes, key_id: str, memory_key: str, epoch: int) -> tuple[str, str]:
        """(fingerprint, base64 of nonce + ciphertext) of a data key, bound to its id, memory, epoch."""
        kek = self._keks[0]
        nonce = os.urandom(12)
        sealed = kek.aead.encrypt(nonce, material, _associated(key_id, memory_key, epoch))
        return kek.fingerprint, base64.b64encode(nonce + sealed).decode()

    def unwrap(self, fingerprint: str, wrapped: str, key_id: str, memory_key: str, epoch: int) -> bytes:
        """The data key; `NamespaceKeyError` when no key of this process has that fingerprint,
        `Tampered` when the record does not authenticate (edited, or moved to another id)."""
        kek = next((k for k in self._keks if k.fingerprint == fingerprint), None)
        if kek is None:
            raise NamespaceKeyError(f"data key {key_id} is wrapped by namespace key {fingerprint}, which this "
                                    f"process does not have (it has {', '.join(self.fingerprints)})")
        raw = base64.b64decode(wrapped)
        try:
            return kek.aead.decrypt(raw[:12], raw[12:], _associated(key_id, memory_key, epoch))
        except InvalidTag:
            raise Tampered(f"wrapped data key {key_id} does not authenticate") from None


def namespace_keys(configured: str, key_file: str = "") -> NamespaceKeys:
    """The keys of `namespace_key` (separated by commas) followed by those of `key_file`."""
    texts = configured.split(",") if configured else []
    if key_file:
        try:
            texts += Path(key_file).read_text().splitlines()
        except OSError as exc:
            raise NamespaceKeyError(f"namespace_key_file {key_file}: {exc.strerror or exc}") from None
    return NamespaceKeys(texts)
