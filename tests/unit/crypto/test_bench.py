"""`python -m bench.crypto` runs and reports a positive rate for every record and mode."""

from __future__ import annotations

import json

from bench import crypto


def test_the_bench_reports_every_record(capsys):
    crypto.main(["--seconds", "0.02", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 3
    for row in rows:
        assert row["om1_per_s"] > 0 and row["om1d_per_s"] > 0 and row["om1_bytes"] > row["bytes"]
