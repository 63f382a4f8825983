"""Hooks of the whole run.  They live here, not in `tests/integration/conftest.py`, because with
`-n` (pytest-xdist) the process that reports is the controller, which loads only this file; the
tests run in the two worker processes, whose reports (their captured output too) reach it.
"""

import pytest


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-s` runs the tests in this process: a worker process's output never reaches the terminal,
    and `-s` is asked for to see it as it comes (figures, a worker's log)."""
    return 0 if config.getoption("capture") == "no" else None


#: What each passing integration test printed: its counts and timings are the evidence of the
#: guarantee it tests, so the run shows them after a pass too, not only in a failure's report.
_FIGURES: list[tuple[str, str]] = []
_FIGURE_LINES = 40  # per test: a worker's log dumped into stdout must not flood the summary


def pytest_runtest_logreport(report):
    # In tests/integration/conftest.py this hook saw only that folder's tests; here it sees every
    # report, and the unit tests' prints are not figures.
    if report.when == "call" and report.passed and "integration" in report.keywords and report.capstdout.strip():
        _FIGURES.append((report.nodeid, report.capstdout.strip()))


def pytest_terminal_summary(terminalreporter):
    if not _FIGURES:
        return
    terminalreporter.section("figures printed by the integration tests")
    for nodeid, text in _FIGURES:
        lines = text.splitlines()
        terminalreporter.write_line(nodeid + (f"  (last {_FIGURE_LINES} of {len(lines)} lines)"
                                              if len(lines) > _FIGURE_LINES else ""))
        for line in lines[-_FIGURE_LINES:]:
            terminalreporter.write_line("    " + line)
