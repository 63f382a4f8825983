"""Previous-observation truncation (spec §6.11)."""

from hypothesis import given, settings, strategies as st

from streams.engine.tokens import get_counter
from streams.engine.truncation import truncate_observations

COUNT = get_counter("tokenx").count


def _log(n: int) -> str:
    return "\n".join(
        f"* {'🔴' if i % 5 == 0 else '🟡'} (09:{i % 60:02d}) observation number {i} about topic {i * 7}"
        for i in range(n))


def test_unlimited_zero_and_fitting_budgets():
    text = _log(10)
    assert truncate_observations(text, None, COUNT) == (text, False)
    assert truncate_observations(text, 0, COUNT) == ("", True)
    assert truncate_observations(text, COUNT(text), COUNT) == (text, False)


def test_keeps_the_recent_tail_and_newest_important_lines_within_budget():
    text = _log(200)
    shown, cut = truncate_observations(text, 300, COUNT)
    assert cut and COUNT(shown) <= 300
    lines = shown.split("\n")
    assert lines[-1] == text.split("\n")[-1]  # the newest line is always there
    assert any("observations truncated here" in line for line in lines)
    # Important lines survive between markers, ahead of the contiguous recent tail.
    assert lines[1].startswith("* 🔴") and "truncated here" in lines[2]
    kept = [line for line in lines if "truncated here" not in line]
    assert sum("🔴" in line for line in kept) > sum("🔴" in line for line in kept[-7:])


def test_a_single_hidden_line_is_kept_verbatim_rather_than_marked():
    text = _log(6)
    shown, _ = truncate_observations(text, COUNT(text) - 1, COUNT)
    assert "[1 observations truncated here]" not in shown


def test_nothing_fits_gives_one_marker():
    assert truncate_observations(_log(5), 3, COUNT) == ("[5 observations truncated here]", True)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 80), budget=st.integers(1, 2000))
def test_result_never_exceeds_the_budget_unless_only_a_marker(n, budget):
    shown, cut = truncate_observations(_log(n), budget, COUNT)
    assert COUNT(shown) <= budget or shown == f"[{n} observations truncated here]"
    assert cut == (shown != _log(n))
