"""What every SQLite file of the read side shares: the read model's (`store.py`) and the search
index's (`projections/search/sqlite_vec.py`).

- A slot per process (`locked_slot`): a process takes the first free slot of its folder, an
  exclusive `flock` on `slot-N.lock` held for its lifetime, and owns that slot's file; the
  system drops a dead process's lock, so a restarted one gets its old slot back.
- One transaction per batch (`atomic`).
- Deleted text leaves the file (`erase_after`): with `secure_delete`, a checkpoint that truncates
  the WAL after a delete.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic", "erase_after", "locked_slot"]

log = logging.getLogger("omstream.projection")


@contextlib.contextmanager
def atomic(db: Any) -> Iterator[None]:
    """Writes on a SQLite connection (`sqlite3`'s or apsw's) committed together, or (on any
    exception) not at all."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def erase_after(db: Any, path: object) -> None:
    """After a committed delete: copy the WAL into the main file and truncate it, so the pages
    that held the deleted rows (zeroed since, by `secure_delete`) are gone from `-wal` too."""
    rows = list(db.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
    if rows and rows[0][0]:  # busy: a reader holds the WAL; the next delete's checkpoint retries
        log.warning("WAL checkpoint after a deletion was blocked by a reader", extra={"path": str(path)})


def locked_slot(folder: Path, slots: int) -> tuple[Path, int] | None:
    """The SQLite file of the first slot of `folder` (made if missing) that no other process
    holds, and the file descriptor of its lock (held until closed); None when every slot is held."""
    folder.mkdir(parents=True, exist_ok=True)
    for slot in range(slots):
        fd = os.open(folder / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return folder / f"slot-{slot}.sqlite", fd
    return None
