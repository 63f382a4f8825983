"""One process at a time: an exclusive lock on a file, held for a `with` block.

For what a first run puts in place and two processes can both find missing (the broker's jars,
the local model's weights, the tests' Node packages): the second waits for the first, then finds
it there.  The lock is the kernel's (`flock`), so a process that dies holding it releases it.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["exclusive"]


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold the lock file `path` (created, with its folder, when missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        yield
