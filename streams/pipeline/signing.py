"""Model results are records of the input log, so anyone who can produce a message could write
one.  A result is accepted only with a signature that a message producer cannot make: an
HMAC-SHA256 of the record's bytes under a key shared by the model agents and the fold (both run
in the worker), sent as the record header `om-signature`.

The key comes from `[omstream] result_key` / `OM_RESULT_KEY` (set it when workers run on several
machines or with data directories of their own); without one, the worker keeps a random key in
`<data_dir>/result.key` (mode 0600), shared by the workers of one data directory.  The key never
appears in a log, an event or a record: workers compare keys by `fingerprint`, an HMAC of a fixed
label under the key (`omstream.worker.key_agreement`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["HEADER", "fingerprint", "result_key", "sign", "signed"]

HEADER = "om-signature"
#: What a key's fingerprint signs: a fixed label, never a record, so a fingerprint cannot be
#: used as a signature.
FINGERPRINT_LABEL = b"omstream result-key fingerprint v1"


def result_key(configured: str, data_dir: Path) -> bytes:
    """The configured key, or this machine's own (made on first use)."""
    if configured:
        return configured.encode()
    path = data_dir / "result.key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        # O_EXCL: two workers starting together keep the same key.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))
    return path.read_text().strip().encode()


def fingerprint(key: bytes) -> str:
    """Names a key without revealing it: equal for equal keys, and no help in forging a result."""
    return hmac.new(key, FINGERPRINT_LABEL, hashlib.sha256).hexdigest()[:32]


def sign(key: bytes, value: bytes) -> bytes:
    return hmac.new(key, value, hashlib.sha256).hexdigest().encode()


def signed(key: bytes, value: bytes,
           headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None) -> bool:
    """Whether `headers` carry a valid signature of `value`."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    given = next((v for k, v in pairs if k == HEADER), None)
    return given is not None and hmac.compare_digest(given, sign(key, value))
