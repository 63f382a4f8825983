"""`python -m bench --against REF` (bench/against.py): REF built apart with its own omstream, and
the comparison table's pairing and ratios, without a broker."""

import subprocess
from pathlib import Path

from bench import __main__ as bench_all
from bench import against

ROOT = Path(bench_all.ROOT)


def test_ratios_are_ours_over_theirs_figure_by_figure():
    assert against.numbers("1,234") == [1234.0] and against.numbers("12 / 164") == [12.0, 164.0]
    assert against.ratio("2,000", "1,000") == "2.00x"
    assert against.ratio("40 / 90", "80 / 60") == "0.50x / 1.50x"
    assert against.ratio("-", "12") == "-" and against.ratio("3", "0") == "-"


def test_figures_pair_by_name_and_a_figure_of_one_side_only_says_so():
    ours = [("a", "10", "messages/s", "note a"), ("new", "5", "ms", "")]
    theirs = [("a", "5", "messages/s", "old note"), ("gone", "7", "ms", "")]
    assert against.paired(ours, theirs) == [("a", "10", "5", "2.00x", "messages/s", "note a"),
                                            ("new", "5", "-", "-", "ms", ""),
                                            ("gone", "-", "7", "-", "ms", "")]


def test_the_comparison_prints_both_sides_of_each_benchmark_and_what_failed():
    def step(rate: float, error: str | None = None) -> bench_all.Step:
        done = next(s for s in bench_all.steps() if s.name == "e2e-1")
        done.result = {"sustained": [{"steps": False, "messages": 4000, "messages_per_s": rate}]}
        done.error, done.seconds = error, 30.0
        return done

    text = bench_all.comparison([step(300.0)], [step(200.0, error="exit 2; no such option")], ("new", "old"),
                                "today", 90.0)
    print(text)
    assert "$ python -m bench --against old" in text and "ratio: new / old" in text
    assert "300  200  1.50x  messages/s" in text
    assert "FAILED (old): exit 2; no such option" in text and "FAILED (new)" not in text


def test_the_ref_is_built_apart_and_imports_its_own_omstream(tmp_path):
    """HEAD's files, a venv of its own, HEAD's omstream installed there (not this checkout's
    editable one), and HEAD's bench run from its files."""
    first = subprocess.run(["git", "-C", str(ROOT), "rev-list", "--max-count=1", "HEAD"], capture_output=True,
                           text=True, check=True).stdout.strip()
    side = against.build(ROOT, first, tmp_path)
    assert side.name == first[: len(side.name)] and (side.root / "pyproject.toml").exists()
    where = subprocess.run([side.python, "-c", "import omstream, bench; print(omstream.__file__, bench.__file__)"],
                           cwd=side.root, capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(str(tmp_path / "venv")) and where[1].startswith(str(side.root))
