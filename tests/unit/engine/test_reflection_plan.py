"""Reflection decisions: §6.7, §6.8, §8.2–8.3 and §15 items 2, 7, 8."""

import pytest

from omstream.engine.prompting.prompts import COMPRESSION_GUIDANCE
from omstream.engine.rules.reflection_plan import (
    ReflectionAttempt,
    buffered_reflection_slice,
    buffered_reflection_suppressed,
    compression_levels,
    compression_start_level,
    is_retry_suppressed,
    ladder_step,
    max_compression_level,
    merge_buffered_reflection,
    plan_reflection,
    suppression_after_commit,
    suppression_after_failure,
)
from omstream.engine.rules.thresholds import reflection_activation_min_tokens, reflection_buffer_start

T = 40_000
ASYNC = {"async_enabled": True, "buffer_activation": 0.5, "block_after": 48_000}


# --- §6.7 whether ------------------------------------------------------------------------------
def test_below_buffer_start_nothing_happens():
    assert reflection_buffer_start(T, 0.5) == 20_000
    assert plan_reflection(19_999, T, **ASYNC).action == "none"


def test_background_reflection_starts_at_half_the_threshold():
    assert plan_reflection(20_000, T, **ASYNC).action == "buffer"
    assert plan_reflection(20_000, T, buffering_in_flight=True, **ASYNC).action == "none"
    assert plan_reflection(25_000, T, has_buffered_reflection=True, **ASYNC).action == "none"


def test_threshold_swaps_the_buffered_reflection_in():
    plan = plan_reflection(40_000, T, has_buffered_reflection=True, **ASYNC)
    assert (plan.action, plan.triggered_by) == ("activate_buffered", "threshold")


def test_threshold_without_buffer_starts_one_then_blocks_at_block_after():
    assert plan_reflection(40_000, T, **ASYNC).action == "buffer"
    assert plan_reflection(45_000, T, buffering_in_flight=True, **ASYNC).action == "none"
    plan = plan_reflection(48_000, T, buffering_in_flight=True, **ASYNC)
    assert (plan.action, plan.triggered_by) == ("reflect", "threshold")


def test_without_async_reflection_runs_synchronously_at_the_threshold():
    assert plan_reflection(39_999, T, async_enabled=False).action == "none"
    assert plan_reflection(40_000, T, async_enabled=False).action == "reflect"


def test_early_triggers_and_their_priority():
    plan = plan_reflection(25_000, T, has_buffered_reflection=True, ttl_expired=True, provider_changed=True, **ASYNC)
    assert (plan.action, plan.triggered_by) == ("activate_buffered", "provider_change")
    plan = plan_reflection(25_000, T, has_buffered_reflection=True, ttl_expired=True, **ASYNC)
    assert plan.triggered_by == "ttl"
    # an early trigger below the buffer start has nothing worth doing
    assert plan_reflection(10_000, T, ttl_expired=True, **ASYNC).action == "none"


def test_a_reflection_in_flight_blocks_another():
    assert plan_reflection(50_000, T, reflecting_in_flight=True, **ASYNC).action == "none"


def test_over_threshold_best_effort_suppresses_an_immediate_retry():
    """§15 item 8: a committed reflection still ≥ T suppresses threshold-triggered retries until
    the log changes by as much as one token; a success under T clears it."""
    committed = 41_000
    suppressed_at = suppression_after_commit(committed, T)
    assert suppressed_at == 41_000
    assert plan_reflection(41_000, T, async_enabled=False, suppressed_at=suppressed_at).action == "none"
    assert plan_reflection(41_001, T, async_enabled=False, suppressed_at=suppressed_at).action == "reflect"
    assert suppression_after_commit(39_999, T) is None
    assert not is_retry_suppressed("threshold", None, 41_000)
    # idle / provider-change triggers are never suppressed
    assert not is_retry_suppressed("ttl", 41_000, 41_000)
    # a failure holds off until the log changes
    assert is_retry_suppressed("threshold", suppression_after_failure(52_000), 52_000)


def test_suppression_also_applies_at_block_after():
    assert plan_reflection(50_000, T, suppressed_at=50_000, **ASYNC).action == "none"


# --- §6.8 what -----------------------------------------------------------------------------------
def test_buffered_slice_covers_half_the_threshold():
    text = "\n".join(f"line {i}" for i in range(100))
    s = buffered_reflection_slice(text, 40_000, T, 0.5)  # 400 tokens per line
    assert (s.line_count, s.estimated_tokens, s.target_tokens) == (50, 20_000, 15_000)
    assert s.text.split("\n")[-1] == "line 49"


def test_buffered_slice_never_exceeds_the_log():
    s = buffered_reflection_slice("a\nb\nc", 300, T, 0.5)
    assert (s.line_count, s.estimated_tokens, s.target_tokens) == (3, 300, 225)


def test_buffered_slice_rounds_like_javascript():
    s = buffered_reflection_slice("a\nb", 12, T, 0.5)  # target 0.75 × 12 = 9; then 0.75 × 6 = 4.5 → 5
    assert s.target_tokens == 9
    assert buffered_reflection_slice("a", 6, T, 0.5).target_tokens == 5


def test_buffered_slice_of_one_giant_line_is_empty():
    assert buffered_reflection_slice("huge", 30_000, T, 0.5).line_count == 0


def test_merge_buffered_reflection():
    """§15 item 2 merge cases."""
    assert merge_buffered_reflection("line 1\nline 2", "the reflection", 2) == "the reflection"
    assert merge_buffered_reflection("line 1\nline 2\nline 3\nline 4", "the reflection", 2) == (
        "the reflection\n\nline 3\nline 4"
    )
    assert merge_buffered_reflection("line 1\nline 2\n\n  ", "r", 2) == "r"


def test_early_swap_suppression_sizes():
    assert reflection_activation_min_tokens(T, 0.5) == 15_000
    early = {"threshold": T, "buffer_activation": 0.5, "buffered_reflection_tokens": 8_000}
    # composition: the unreflected tail is still smaller than the reflection
    assert buffered_reflection_suppressed("ttl", tail_tokens=7_999, combined_tokens=20_000, **early)
    # size: the merged log is under 15 000
    assert buffered_reflection_suppressed("provider_change", tail_tokens=8_000, combined_tokens=14_999, **early)
    assert not buffered_reflection_suppressed("ttl", tail_tokens=8_000, combined_tokens=15_000, **early)
    assert not buffered_reflection_suppressed("threshold", tail_tokens=0, combined_tokens=0, **early)


# --- §8.2–8.3 which answer ------------------------------------------------------------------------
def test_compression_guidance_levels():
    assert COMPRESSION_GUIDANCE[1] == ("## COMPRESSION REQUIRED", "8/10")
    assert COMPRESSION_GUIDANCE[2] == ("## AGGRESSIVE COMPRESSION REQUIRED", "6/10")
    assert COMPRESSION_GUIDANCE[3] == ("## CRITICAL COMPRESSION REQUIRED", "4/10")
    assert COMPRESSION_GUIDANCE[4] == ("## EXTREME COMPRESSION REQUIRED", "2/10")
    assert 0 not in COMPRESSION_GUIDANCE


@pytest.mark.parametrize(("model", "manual", "start", "levels"), [
    ("google/gemini-2.5-flash", False, 2, (2, 3, 4)),
    ("gemini/gemini-2.5-flash", False, 2, (2, 3, 4)),
    ("openai/gpt-5-mini", False, 1, (1, 2, 3, 4)),
    (None, False, 1, (1, 2, 3, 4)),  # unresolvable model
    ("google/gemini-2.5-flash", True, 0, (0, 1, 2, 3)),
])
def test_start_level_and_ladder(model, manual, start, levels):
    assert compression_start_level(model, manual=manual) == start
    assert compression_levels(start) == levels
    assert max_compression_level(start) == levels[-1]


def run_ladder(answers, *, start_level=0, target=100, input_tokens=500):
    """Drive the ladder as a fold would: one attempt per model result."""
    attempts, markers, level = [], [], start_level
    for tokens, failed in answers:
        attempts.append(ReflectionAttempt(level, tokens, failed))
        step = ladder_step(attempts, start_level=start_level, target=target, input_tokens=input_tokens)
        if step.action != "retry":
            return step, len(attempts), markers
        markers.append(step.message)
        level = step.next_level
    raise AssertionError("the ladder asked for more attempts than scripted")


def test_same_over_target_output_makes_four_calls_and_keeps_the_last():
    step, calls, markers = run_ladder([(150, False)] * 5)
    assert (step.action, step.accepted_index, calls) == ("accept", 3, 4)
    assert markers[0] == "Did not compress below threshold (500 → 150, target: 100), retrying at level 1"
    assert len(markers) == 3


def test_success_on_third_attempt():
    step, calls, markers = run_ladder([(150, False), (120, False), (90, False)])
    assert (step.action, step.accepted_index, calls, len(markers)) == ("accept", 2, 3, 2)


def test_success_on_second_attempt_after_one_failed_marker():
    step, calls, markers = run_ladder([(150, False), (99, False)])
    assert (step.accepted_index, calls) == (1, 2)
    assert len(markers) == 1 and "retrying at level 1" in markers[0]


def test_last_level_keeps_the_smallest_usable_answer():
    """Normative choice 4: not the last one as 1.31.0 does."""
    step, calls, _ = run_ladder([(150, False), (130, False), (170, False), (160, False)])
    assert (step.accepted_index, calls) == (1, 4)
    step, _, _ = run_ladder([(150, False), (130, False), (170, False), (0, True)])
    assert step.accepted_index == 1


def test_failed_attempts_escalate_and_a_later_valid_one_wins():
    step, calls, markers = run_ladder([(0, True), (0, True), (80, False)], start_level=1)
    assert (step.action, step.accepted_index, calls) == ("accept", 2, 3)
    # a failed attempt reports the input size as its result
    assert markers[0] == "Did not compress below threshold (500 → 500, target: 100), retrying at level 2"


def test_all_attempts_degenerate_fail():
    step, calls, _ = run_ladder([(0, True)] * 3, start_level=2)
    assert (step.action, calls) == ("fail", 3)
    assert "empty output after 3 attempt(s)" in step.message


def test_ladder_needs_an_attempt():
    with pytest.raises(ValueError):
        ladder_step([], start_level=1, target=1, input_tokens=1)
