"""pydantic's validation errors as `Problem`s: documented option paths, messages that say the fix."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import ValidationError

from .models import MODEL_TAGS
from .options import OPTION_NAMES
from .problems import Problem, RuleViolations

__all__ = ["validation_problems"]


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if part in MODEL_TAGS:
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = OPTION_NAMES.get(part, part)
            path += f".{name}" if path else name
    return path or "observationalMemory"


def _message(error: Any) -> str:
    kind, message = error["type"], error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        near = difflib.get_close_matches(key, set(OPTION_NAMES.values()), n=1)
        guess = f"; did you mean {near[0]!r}?" if near else ""
        return f"is not an option here; remove it or correct its spelling{guess}"
    if kind == "missing":
        return "is required; add it"
    if kind.startswith("bool"):
        return f"must be true or false, got {error.get('input')!r}"
    return str(message)


def validation_problems(exc: ValidationError) -> tuple[Problem, ...]:
    """A problem per error; the cross-option rules keep the paths they named themselves."""
    problems: list[Problem] = []
    for error in exc.errors():
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, RuleViolations):
            problems.extend(cause.problems)
        else:
            problems.append(Problem(_path(error["loc"]), _message(error)))
    return tuple(problems)
