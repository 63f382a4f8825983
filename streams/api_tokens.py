"""The tokens of `om serve` and the resources each one may read.

A token is bound to resource ids (the `resourceId` of a thread's messages) or to `*`, every
resource.  The settings give them as a table (TOML `api_tokens = {"<token>" = ["u1", "u2"],
"<admin token>" = "*"}`) or as text, in `OM_API_TOKENS` and in `api_tokens_file`: entries
`TOKEN = RESOURCE, RESOURCE` separated by `;` or new lines, `#` starting a comment line.

A token is 16 to 512 characters of letters, digits and `.`, `_`, `~`, `+`, `/`, `-` (what
`secrets.token_urlsafe()` makes), so it is never mistaken for a separator.  Problems name the
entry by its number and never show a token.  `TokenTable` keeps only SHA-256 digests of the
tokens and compares a presented token's digest with every one (`hmac.compare_digest`), so
neither the comparison's time nor a memory dump gives a token away.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ALL", "Grant", "TokenGrants", "TokenTable", "grants_from_table", "grants_from_text", "merge_grants"]

ALL = "*"
TOKEN = re.compile(r"[A-Za-z0-9._~+/-]{16,512}")
TOKEN_RULE = ("a token is 16 to 512 letters, digits or . _ ~ + / - "
              "(e.g. python -c 'import secrets; print(secrets.token_urlsafe())')")

#: The settings' form: (token, resources) pairs, `("*",)` for every resource.
TokenGrants = tuple[tuple[str, frozenset[str]], ...]


@dataclass(frozen=True)
class Grant:
    """What one token may read."""

    resources: frozenset[str]

    @property
    def everything(self) -> bool:
        return ALL in self.resources

    def may_read(self, resource: str | None) -> bool:
        """A thread whose messages name no resource is readable with `*` only."""
        return self.everything or (resource is not None and resource in self.resources)


def _resources(values: Iterable[Any], where: str) -> frozenset[str]:
    found: list[str] = []
    for value in values:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}: a resource id is a non-empty string, got {value!r}")
        found.append(value.strip())
    if not found:
        raise ValueError(f"{where}: name at least one resource id, or '*' for every resource")
    if ALL in found and len(found) > 1:
        raise ValueError(f"{where}: '*' already means every resource; give it alone")
    return frozenset(found)


def _checked_token(token: Any, where: str) -> str:
    if not isinstance(token, str) or not TOKEN.fullmatch(token):
        raise ValueError(f"{where}: {TOKEN_RULE}")
    return token


def _no_repeats(pairs: list[tuple[str, frozenset[str]]], where: str) -> TokenGrants:
    seen: set[str] = set()
    for number, (token, _) in enumerate(pairs, 1):
        if token in seen:
            raise ValueError(f"{where} {number}: this token is given twice")
        seen.add(token)
    return tuple(pairs)


def grants_from_text(text: str, *, unit: str = "entry") -> TokenGrants:
    """`TOKEN = R1, R2; TOKEN = *` (or one entry a line); raises ValueError naming the entry."""
    pairs: list[tuple[str, frozenset[str]]] = []
    # A file's entries are numbered as its lines (blank ones and comments counted), so a
    # problem points at the line; a variable's are separated by ';' as well.
    entries = [e.strip() for e in (text.splitlines() if unit == "line" else re.split(r"[;\n]", text))]
    for number, entry in enumerate(entries, 1):
        if not entry or entry.startswith("#"):
            continue
        where = f"{unit} {number}"
        token, sep, rest = entry.partition("=")
        if not sep:
            raise ValueError(f"{where}: expected TOKEN = RESOURCE[, RESOURCE...] or TOKEN = *")
        pairs.append((_checked_token(token.strip(), where), _resources(rest.split(","), where)))
    return _no_repeats(pairs, unit)


def grants_from_table(value: Any) -> TokenGrants:
    """A settings-file value: a table of token -> resource id, list of them, or '*'; or the text form."""
    if isinstance(value, str):
        return grants_from_text(value)
    if not isinstance(value, Mapping):
        raise ValueError("expected a table of token = [resource ids] or '*', or a string 'TOKEN = R1, R2; TOKEN = *'")
    pairs: list[tuple[str, frozenset[str]]] = []
    for number, (token, resources) in enumerate(value.items(), 1):
        where = f"entry {number}"
        listed = [resources] if isinstance(resources, str) else resources
        if not isinstance(listed, list):
            raise ValueError(f"{where}: expected a resource id, a list of them, or '*'")
        pairs.append((_checked_token(token, where), _resources(listed, where)))
    return _no_repeats(pairs, "entry")


def merge_grants(*sources: TokenGrants) -> TokenGrants:
    """Every source's tokens; the same token in two sources may read what both give it."""
    merged: dict[str, frozenset[str]] = {}
    for source in sources:
        for token, resources in source:
            both = merged.get(token, frozenset()) | resources
            merged[token] = frozenset({ALL}) if ALL in both else both
    return tuple(merged.items())


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenTable:
    """The grants by token digest; `grant(token)` is None for a token it does not know."""

    def __init__(self, grants: TokenGrants) -> None:
        self._grants = [(_digest(token), Grant(resources)) for token, resources in grants]

    def __len__(self) -> int:
        return len(self._grants)

    def __repr__(self) -> str:
        return f"TokenTable({len(self._grants)} tokens)"

    def grant(self, token: str) -> Grant | None:
        digest = _digest(token)
        found: Grant | None = None
        for stored, grant in self._grants:  # every entry, whether or not one matched already
            if hmac.compare_digest(digest, stored):
                found = grant
        return found
