"""What a check of the options finds: a `Problem` per error, and the exceptions that carry them."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OmError

__all__ = ["OmConfigError", "Problem", "RuleViolations"]


@dataclass(frozen=True)
class Problem:
    """One configuration error: the documented option path and what is wrong plus the fix."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class OmConfigError(OmError, ValueError):
    """Raised by `load_om_config`; `problems` lists every error found."""

    def __init__(self, problems: tuple[Problem, ...] | list[Problem]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"invalid observationalMemory options:\n{lines}")


class RuleViolations(OmError, ValueError):
    """The cross-option rules that failed; carried through pydantic to keep each path."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(map(str, problems)))
