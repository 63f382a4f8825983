"""Crypto-shredding: every memory's content encrypted under a data key of its own, so deleting
the key deletes every copy of the content, in every topic and backup, without rewriting history.

- `envelope`: one field sealed with AES-GCM (edges) or AES-GCM-SIV (deterministic outputs);
- `wrapping`: the namespace key that wraps every data key, and its rotation;
- `book`: the rules of the keys topic `<ns>.keys` (no I/O);
- `keyring`: `KeyRing`, the topic followed live: get-or-create, shred, rewrap;
- `fields`: which fields of each wire record are content, and `encrypt_fields`/`decrypt_fields`.

- `sealing`: `Sealer`, what the pipeline calls: a record's bytes sealed and opened.
"""

from __future__ import annotations

from .book import KeyBook
from .envelope import DataKey, is_sealed, open_value, parse, seal_value
from .errors import CryptoError, KeyNotLoaded, KeyRingError, NamespaceKeyError, Shredded, Tampered
from .fields import CONTENT_FIELDS, decrypt_fields, encrypt_fields, sealed_key_ids
from .keyring import KeyRing
from .sealing import MARK, PLAIN, Sealer, content_owner, record_owner, sealer_of
from .wrapping import NamespaceKeys, namespace_keys

__all__ = [
    # keys
    "DataKey", "KeyBook", "KeyRing", "NamespaceKeys", "namespace_keys",
    # fields and envelopes
    "CONTENT_FIELDS", "decrypt_fields", "encrypt_fields", "is_sealed", "open_value", "parse", "sealed_key_ids",
    "seal_value",
    # the pipeline's
    "MARK", "PLAIN", "Sealer", "content_owner", "record_owner", "sealer_of",
    # errors
    "CryptoError", "KeyNotLoaded", "KeyRingError", "NamespaceKeyError", "Shredded", "Tampered",
]
