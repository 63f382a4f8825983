"""`python -m bench.delivery` runs end to end on its own broker and prints both figures."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_delivery_bench_prints_both_paths():
    done = subprocess.run([sys.executable, "-m", "bench.delivery", "--records", "300"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    for path in ("aiokafka getmany", r"faust \(the worker's path\)"):
        assert re.search(path + r": 300 records in [\d.]+ s = [\d,]+/s", out), out
