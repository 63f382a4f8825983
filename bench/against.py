"""`python -m bench --against REF`: this checkout and another commit measured in one run.

These machines vary several-fold from hour to hour, so a figure is only worth comparing with one
measured beside it.  `--against REF` builds REF in a temporary directory and runs every chosen
benchmark twice, once for each side, one right after the other (the side that goes first
alternates from one benchmark to the next, so a machine that slows down during the run does not
favour either), and prints each figure of both with their ratio.

How REF is built, offline and in seconds:

- its files are `git archive REF` of this repository, unpacked;
- its venv is a new one whose `site-packages` lists this interpreter's (a `.pth` line): the
  dependencies are the ones installed here, the omstream in it is REF's, installed from its files
  with `pip install --no-deps --no-build-isolation` (not editable, so nothing of this checkout
  leaks in: this checkout's editable hook is a `.pth` that a listed directory does not run);
- each benchmark of REF runs REF's own `bench/` with REF's omstream (`python -m bench.<name>`
  in REF's files), with this checkout's arguments, so the two sides differ only by the commit.

A benchmark whose arguments REF does not know fails for REF alone; the table says so.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import venv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: (figure, value, unit, note), as the benchmarks' row functions give them.
Row = tuple[str, str, str, str]


@dataclass(frozen=True)
class Side:
    """Where one side's benchmarks run: its interpreter and its files (the bench package's root)."""

    name: str
    python: str
    root: Path


def short_ref(root: Path, ref: str) -> str:
    """REF's abbreviated commit hash (raises CalledProcessError with git's message when unknown)."""
    return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", f"{ref}^{{commit}}"], check=True,
                          capture_output=True, text=True).stdout.strip()


def build(root: Path, ref: str, into: Path | None = None) -> Side:
    """REF's files and venv under `into` (a new temporary directory by default)."""
    commit = short_ref(root, ref)
    into = into or Path(tempfile.mkdtemp(prefix=f"omstream-bench-{commit}-"))
    src, env = into / "src", into / "venv"
    archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", commit], check=True,
                             capture_output=True).stdout
    src.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    venv.EnvBuilder(with_pip=False, clear=True).create(env)
    python = str(env / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # Ours after theirs on sys.path: REF's omstream (installed below) wins, the rest comes from here.
    Path(purelib, "omstream-bench-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                    str(src)], check=True, capture_output=True, text=True)
    return Side(commit, python, src)


def here(root: Path) -> Side:
    """This checkout, as it is (uncommitted changes included), with this interpreter."""
    described = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True,
                               text=True).stdout.strip()
    return Side(described or "this checkout", sys.executable, root)


# --- the table --------------------------------------------------------------------------------------
NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def numbers(value: str) -> list[float]:
    """The figures in a table value: "1,234" -> [1234.0]; "12 / 164" -> [12.0, 164.0]; "-" -> []."""
    return [float(n.replace(",", "")) for n in NUMBER.findall(value)]


def ratio(ours: str, theirs: str) -> str:
    """ours / theirs for each figure of the value ("1.21x", or "0.9x / 1.4x" for a p50 / p99 pair)."""
    a, b = numbers(ours), numbers(theirs)
    if not a or len(a) != len(b):
        return "-"
    return " / ".join(f"{x / y:.2f}x" if y else "-" for x, y in zip(a, b))


def paired(ours: Sequence[Row], theirs: Sequence[Row]) -> list[tuple[str, ...]]:
    """(figure, ours, theirs, ratio, unit, our note), matched by figure name; a figure of one side
    only has '-' for the other."""
    by_name = {row[0]: row for row in theirs}
    out: list[tuple[str, ...]] = []
    for row in ours:
        other = by_name.pop(row[0], None)
        out.append((row[0], row[1], other[1] if other else "-", ratio(row[1], other[1]) if other else "-", row[2],
                    row[3]))
    out += [(row[0], "-", row[1], "-", row[2], row[3]) for row in by_name.values()]
    return out


def block(command: str, seconds: tuple[float, float], rows: Sequence[tuple[str, ...]], names: tuple[str, str],
          errors: Sequence[str]) -> list[str]:
    """One benchmark's lines of the comparison table: its command, each side's time, then its rows."""
    head = ("figure", names[0], names[1], "ratio", "unit", "note (" + names[0] + ")")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(6)]
    lines = [f"$ {command}   ({seconds[0]:.0f} s / {seconds[1]:.0f} s)"]
    for row in [head, *rows]:
        lines.append("  " + "  ".join([row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].rjust(widths[2]),
                                       row[3].rjust(widths[3]), row[4].ljust(widths[4]), row[5]]).rstrip())
    return lines + [f"  FAILED ({name}): {error[:200]}" for name, error in zip(names, errors) if error]
