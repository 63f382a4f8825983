"""The errors of crypto-shredding, under `OmError`.

    CryptoError                 something about keys or ciphertexts
    ├── Shredded                the data key is gone: the content is deleted, not broken
    ├── Tampered                a ciphertext that does not authenticate (edited, moved, truncated)
    ├── KeyNotLoaded            the key ring has not read far enough to know the key yet
    └── NamespaceKeyError       no usable namespace key in the settings
    KeyRingError                the key ring cannot follow or write its topic (a fault)

`Shredded` is the one callers meet in normal operation: a record of a deleted memory.  They
treat it as deleted (pass the record over), never as a failure that stops or dead-letters
anything.  `Tampered` is a real fault (a dead letter, without the plaintext it never had).
"""

from __future__ import annotations

from omstream.schemas.errors import OmError

__all__ = ["CryptoError", "KeyNotLoaded", "KeyRingError", "NamespaceKeyError", "Shredded", "Tampered"]


class CryptoError(OmError, ValueError):
    """A key or a ciphertext that cannot be used."""


class Shredded(CryptoError):
    """The data key of this content was shredded (its memory was deleted): treat as deleted."""

    def __init__(self, key_id: str, memory_key: str | None = None) -> None:
        self.key_id, self.memory_key = key_id, memory_key
        where = f" of {memory_key}" if memory_key else ""
        super().__init__(f"data key {key_id}{where} was shredded: the content is deleted")


class Tampered(CryptoError):
    """A ciphertext that does not authenticate under its key and place: edited, truncated, or
    moved to another memory or field.  Dead-letter the record (it has no readable text)."""


class KeyNotLoaded(CryptoError):
    """The key ring has not yet read the record of this key id: catch up, then ask again
    (after catching up, an unknown key id is a shredded one)."""


class NamespaceKeyError(CryptoError):
    """The namespace key is missing or unusable; the message says which setting to fix."""


class KeyRingError(OmError, RuntimeError):
    """The key ring stopped following `<ns>.keys` or cannot create a key: restart the process
    (the cause is chained and logged)."""
