"""Positions in the input log `<ns>.log`, as writers and readers pass them.

A send of `OmClient` returns the position it wrote; `om serve` takes one as `after=` and waits
until its projection has applied the fold's output for that record (read your own writes).  Both
sides use this one type, so the read side needs no part of the producer.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["LogPosition"]


class LogPosition(NamedTuple):
    """Where a record was written in `<ns>.log`; `str()` is the `after=` form `partition:offset`."""

    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> LogPosition:
        """`"1:42"` -> `LogPosition(1, 42)`; `ValueError` for anything else."""
        partition, sep, offset = text.partition(":")
        if not sep or not partition.isdigit() or not offset.isdigit():
            raise ValueError(f"a log position is <partition>:<offset>, not {text!r}")
        return cls(int(partition), int(offset))
