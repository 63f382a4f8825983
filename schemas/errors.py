"""The one root of every error omstream raises on purpose.

A caller (the CLI, a web handler, a user's program) can tell "omstream refused this, with a
reason meant for a person" from a bug by catching `OmError`; each subclass keeps the built-in
base it always had (`ValueError`, `RuntimeError`, `OSError`), so existing `except` clauses hold.
"""

from __future__ import annotations

__all__ = ["OmError"]


class OmError(Exception):
    """An error of omstream's own, whose message is meant to be shown as it is."""
