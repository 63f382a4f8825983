"""Previous-observation truncation (spec §6.11)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.engine.prompting.truncation import truncate_observations
from omstream.engine.rules.tokens import get_counter

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


def test_spec_case_400_lines_budget_200():
    """§15 item 10: within budget, marked, newest kept, oldest dropped."""
    text = "\n".join(f"* 🟡 (10:{i % 60:02d}) observation {i} about the project status" for i in range(400))
    shown, cut = truncate_observations(text, 200, COUNT)
    assert cut and COUNT(shown) <= 200
    assert "observations truncated here]" in shown
    assert shown.split("\n")[-1] == text.split("\n")[-1]
    assert "observation 0 " not in shown


def test_the_observer_sees_the_budget_and_the_log_keeps_everything():
    from omstream.engine.fold import fold, new_state
    from omstream.engine.prompting.truncation import TRUNCATION_NOTICE
    from tests.helpers import engine, message, scripted_result

    config = engine(300, observation={"previousObserverTokens": 60})
    state, jobs = new_state("thread:t1", "t1", "u1"), []
    for i in range(40):
        out = fold(state, message(i, words=40), config)
        state, jobs = out.state, jobs + list(out.jobs)
        while jobs and state.in_flight is not None:
            out = fold(state, scripted_result(jobs.pop(0)), config)
            state, jobs = out.state, jobs + list(out.jobs)
    assert state.observation_tokens > 60
    last = fold(state, message(99, words=400), config)
    request = last.jobs[0].messages[1].content
    assert request.count(TRUNCATION_NOTICE) == 1
    previous = request.split("## Previous Observations\n\n")[1].split("\n\n---")[0]
    assert COUNT(previous) <= 60
    assert state.observations.count("User said") >= 10  # the stored log keeps everything
