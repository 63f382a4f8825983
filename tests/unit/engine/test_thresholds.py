"""Token windows: every number of spec §2.1, §6.1, §6.2, the §6.4 projection cases, §6.9."""

import pytest

from omstream.engine.rules.resolution import resolve
from omstream.engine.rules.thresholds import (
    BufferCandidate,
    ThresholdRange,
    base_message_tokens,
    base_reflection_tokens,
    buffer_interval,
    buffer_ramp_point,
    dynamic_threshold,
    effective_message_threshold,
    effective_reflection_threshold,
    enough_to_buffer,
    max_threshold,
    min_buffer_tokens,
    projected_message_removal,
    reflection_buffer_activation,
    requires_blocking_observation,
    resolve_activation_ratio,
    resolve_block_after,
    resolve_buffer_tokens,
    resolve_retention_floor,
    retention_floor,
    round_half_up,
    safe_buffer_prefix,
    should_trigger_buffer,
    status_windows,
)
from omstream.schemas.config import load_om_config

RANGE = ThresholdRange(30_000, 70_000)


# --- §2.1 derived numbers with all defaults ------------------------------------------------
def test_derived_numbers_with_all_defaults():
    t = resolve(load_om_config({}))
    o, r = t.observation, t.reflection
    assert o.message_tokens == 30_000
    assert o.buffer_tokens == 6_000
    assert o.buffer_ramp_point == 23_400 == buffer_ramp_point(30_000, 6_000)
    assert buffer_interval(23_400, 30_000, o.buffer_tokens) == 3_000  # interval halves above it
    assert buffer_interval(23_399, 30_000, o.buffer_tokens) == 6_000
    assert o.min_buffer_tokens == 3_000 == min_buffer_tokens(o.buffer_tokens)
    assert o.retention_floor == 6_000
    assert o.activation_ratio == 0.8
    assert o.block_after == 36_000
    assert r.observation_tokens == 40_000
    assert r.buffer_start == 20_000
    assert r.block_after == 48_000
    assert t.total_budget is None


def test_shared_budget_with_buffering_off():
    t = resolve(load_om_config({"shareTokenBudget": True, "observation": {"bufferTokens": False}}))
    assert t.total_budget == 70_000
    # buffering off resolves bufferTokens, both bufferActivations and both blockAfters to nothing (§2)
    o, r = t.observation, t.reflection
    assert (o.buffer_tokens, o.retention_floor, o.activation_ratio, o.block_after) == (None, None, None, None)
    assert (r.buffer_start, r.block_after) == (None, None)


def test_explicit_block_after_is_honoured():
    assert resolve(load_om_config({"observation": {"blockAfter": 1.5}})).observation.block_after == 45_000
    assert resolve(load_om_config({"observation": {"blockAfter": 50_000}})).observation.block_after == 50_000


def test_a_memorys_override_replaces_the_configured_thresholds_when_usable():
    # spec §2: an observation override at or below bufferTokens, or at or below an absolute
    # bufferActivation, would leave nothing to buffer or activate: it is ignored
    assert base_message_tokens(None, 30_000, buffer_tokens=6_000, buffer_activation=0.8) == 30_000
    assert base_message_tokens(8_000, 30_000, buffer_tokens=6_000, buffer_activation=0.8) == 8_000
    assert base_message_tokens(6_000, 30_000, buffer_tokens=6_000, buffer_activation=0.8) == 30_000
    assert base_message_tokens(7_000, 30_000, buffer_tokens=6_000, buffer_activation=7_000) == 30_000
    assert base_message_tokens(500, 30_000, buffer_tokens=None, buffer_activation=None) == 500
    assert base_reflection_tokens(None, 40_000) == 40_000
    assert base_reflection_tokens(12_000, 40_000) == 12_000


def test_retention_floor_and_the_reflections_activation_without_buffering():
    assert retention_floor(0.8, 30_000) == 6_000
    assert retention_floor(5_000, 30_000) == 5_000  # absolute: tokens to keep
    assert retention_floor(None, 30_000) == 0  # buffering off: nothing is kept back
    assert reflection_buffer_activation(0.25) == 0.25
    assert reflection_buffer_activation(None) == 0.5  # the default, read when buffering is off


def test_round_half_up_is_javascript_math_round():
    assert [round_half_up(x) for x in (0.5, 1.5, 2.5, 36_666.5, -0.5)] == [1, 2, 3, 36_667, 0]


# --- §6.1 dynamic threshold / §15 item 1 -----------------------------------------------------
def test_max_threshold():
    assert max_threshold(ThresholdRange(8_000, 70_000)) == 70_000
    assert max_threshold(30_000) == 30_000


@pytest.mark.parametrize(("observations", "threshold"), [
    (0, 70_000), (10_000, 60_000), (50_000, 30_000), (100_000, 30_000), (33_333, 36_667),
])
def test_dynamic_threshold(observations, threshold):
    assert dynamic_threshold(RANGE, observations) == threshold


def test_plain_threshold_is_not_dynamic():
    assert dynamic_threshold(30_000, 50_000) == 30_000


@pytest.mark.parametrize(("value", "messages", "expected"), [
    (0.25, 20_000, 5_000), (0.1, RANGE, 7_000), (5_000, RANGE, 5_000), (1, RANGE, 1),
    (0.01, 100_000, 1_000), (0.2, 30_000, 6_000), (False, 30_000, None), (None, 30_000, None),
])
def test_resolve_buffer_tokens(value, messages, expected):
    assert resolve_buffer_tokens(value, max_threshold(messages)) == expected


@pytest.mark.parametrize(("value", "messages", "expected"), [
    (1.5, 20_000, 30_000), (1.0, 20_000, 20_000), (1.2, RANGE, 84_000), (50_000, 30_000, 50_000),
    (100, 30_000, 100), (1.3, 33_333, 43_333), (None, 30_000, None),
])
def test_resolve_block_after(value, messages, expected):
    assert resolve_block_after(value, max_threshold(messages)) == expected


@pytest.mark.parametrize(("activation", "floor"), [
    (0.7, 9_000), (5_000, 5_000), (1_000, 1_000), (1.0, 0), (0, 30_000), (-0.5, 30_000), (1.5, 0),
    (0.8, 6_000),
])
def test_resolve_retention_floor(activation, floor):
    assert resolve_retention_floor(activation, 30_000) == floor


@pytest.mark.parametrize(("activation", "ratio"), [
    (0.7, 0.7), (5_000, 0.8333), (50_000, 0), (30_000, 0), (-0.5, 0), (1.5, 1),
])
def test_resolve_activation_ratio(activation, ratio):
    assert resolve_activation_ratio(activation, 30_000) == pytest.approx(ratio, abs=1e-4)


# --- normative choice 8: shareTokenBudget pools both ways ----------------------------------
def test_shared_budget_message_threshold():
    share = {"share_token_budget": True}
    assert effective_message_threshold(30_000, 40_000, 0, **share) == 70_000
    assert effective_message_threshold(30_000, 40_000, 10_000, **share) == 60_000
    assert effective_message_threshold(30_000, 40_000, 50_000, **share) == 30_000
    assert effective_message_threshold(30_000, 40_000, 10_000, share_token_budget=False) == 30_000


def test_shared_budget_reflection_threshold():
    share = {"share_token_budget": True}
    assert effective_reflection_threshold(30_000, 40_000, 0, **share) == 70_000
    assert effective_reflection_threshold(30_000, 40_000, 12_000, **share) == 58_000
    assert effective_reflection_threshold(30_000, 40_000, 45_000, **share) == 40_000
    assert effective_reflection_threshold(30_000, 40_000, 12_000, share_token_budget=False) == 40_000


# --- §6.2 async buffer trigger --------------------------------------------------------------
def test_buffer_trigger_crosses_intervals():
    assert not should_trigger_buffer(5_999, 0, 30_000, 6_000)
    assert should_trigger_buffer(6_000, 0, 30_000, 6_000)
    assert not should_trigger_buffer(11_999, 6_000, 30_000, 6_000)
    assert should_trigger_buffer(12_000, 6_000, 30_000, 6_000)
    assert not should_trigger_buffer(50_000, 0, 30_000, None)  # buffering off


def test_buffer_trigger_points_over_one_long_turn():
    """§6.6a: chunks near 6 000, 12 000, 18 000, then every 3 000 from the 23 400 ramp point,
    each needing ≥ 3 000 new tokens (the trigger at 24 000 finds only 600)."""
    boundary, covered, triggers, chunks = 0, 0, [], []
    for pending in range(0, 30_000, 100):
        if should_trigger_buffer(pending, boundary, 30_000, 6_000):
            triggers.append(pending)
            boundary = pending  # the boundary moves before the buffer call, whatever it finds
            if enough_to_buffer(pending - covered, 6_000):
                chunks.append(pending)
                covered = pending
    assert triggers == [6_000, 12_000, 18_000, 23_400, 24_000, 27_000]
    assert chunks == [6_000, 12_000, 18_000, 23_400, 27_000]


def test_minimum_new_tokens_per_buffer():
    assert min_buffer_tokens(6_000) == 3_000
    assert min_buffer_tokens(None) == 2_500  # the original's fallback bufferTokens of 5 000
    assert not enough_to_buffer(2_999, 6_000)
    assert enough_to_buffer(3_000, 6_000)
    assert enough_to_buffer(10, 6_000, skip_minimum=True)  # bufferOnIdle
    assert not enough_to_buffer(0, 6_000, skip_minimum=True)  # nothing to buffer at all


# --- §6.4 projected removal (thresholds.test.ts cases) -----------------------------------------
@pytest.mark.parametrize(("chunks", "removed"), [
    ([5_000, 5_000, 5_000], 15_000),
    ([8_000, 9_000], 17_000),
    ([3_000, 25_000], 3_000),  # the over boundary overshoots by 12 000 > 8 550
    ([10_000], 10_000),
])
def test_projected_removal_ratio_0_7(chunks, removed):
    # threshold 30 000, pending 25 000 ⇒ floor 9 000, target 16 000
    assert projected_message_removal(chunks, 0.7, 30_000, 25_000) == removed


def test_projected_removal_ratio_1():
    assert projected_message_removal([5_000, 5_000], 1.0, 30_000, 10_000) == 10_000


def test_projected_removal_absolute_retention():
    assert projected_message_removal([4_000, 4_000, 4_000], 5_000, 30_000, 15_000) == 12_000


def test_projected_removal_edge_cases():
    assert projected_message_removal([], 0.8, 30_000, 40_000) == 0
    assert projected_message_removal([3_000], 0.8, 30_000, 6_000) == 0  # target 0: nothing to remove
    # the spec's worked example, seen from the status marker
    assert projected_message_removal([6_100, 6_050, 6_200, 6_000, 3_100], 0.8, 30_000, 30_500) == 27_450


# --- §6.1 status windows ----------------------------------------------------------------------
DEFAULTS = {"message_tokens": 30_000, "reflection_tokens": 40_000, "buffer_tokens": 6_000,
            "buffer_activation": 0.8, "block_after": 36_000}


def test_status_below_threshold_buffers_on_interval():
    s = status_windows(pending_tokens=12_500, observation_tokens=0, last_buffered_at_tokens=6_200,
                       chunk_message_tokens=(6_100,), **DEFAULTS)
    assert (s.threshold, s.should_observe, s.should_buffer, s.should_block) == (30_000, False, True, False)
    assert s.can_activate and s.buffered_message_tokens == 6_100
    assert s.unbuffered_pending_tokens == 6_400
    assert (s.reflection_threshold, s.should_reflect) == (40_000, False)


def test_status_at_the_worked_example():
    s = status_windows(pending_tokens=30_500, observation_tokens=40_000, last_buffered_at_tokens=30_000,
                       chunk_message_tokens=(6_100, 6_050, 6_200, 6_000, 3_100), **DEFAULTS)
    assert s.should_observe and not s.should_block and not s.should_buffer
    assert s.projected_message_removal == 27_450
    assert s.unbuffered_pending_tokens == 30_500 - 27_450
    assert s.should_reflect


def test_status_blocks_at_block_after_and_still_buffers_below_it():
    s = status_windows(pending_tokens=31_000, observation_tokens=0, **DEFAULTS)
    assert s.should_observe and s.should_buffer and not s.should_block and not s.can_activate
    assert status_windows(pending_tokens=36_000, observation_tokens=0, **DEFAULTS).should_block
    assert not status_windows(pending_tokens=31_000, observation_tokens=0, buffering_in_flight=True,
                              **DEFAULTS).should_buffer


def test_status_without_buffering_blocks_at_the_threshold():
    s = status_windows(pending_tokens=30_000, observation_tokens=0, message_tokens=30_000, reflection_tokens=40_000)
    assert s.should_observe and s.should_block and not s.should_buffer
    assert s.projected_message_removal == 0


def test_status_reports_at_most_the_pending_tokens_as_buffered():
    s = status_windows(pending_tokens=5_000, observation_tokens=0, last_buffered_at_tokens=0,
                       chunk_message_tokens=(4_000, 3_000), **DEFAULTS)
    assert (s.buffered_message_tokens, s.unbuffered_pending_tokens) == (5_000, 0)


def test_status_with_shared_budget():
    s = status_windows(pending_tokens=50_000, observation_tokens=10_000, message_tokens=30_000,
                       reflection_tokens=40_000, share_token_budget=True)
    assert (s.threshold, s.should_observe) == (60_000, False)
    assert (s.reflection_threshold, s.should_reflect) == (40_000, False)


def test_blocking_observation_rule():
    assert not requires_blocking_observation(35_999, threshold=30_000, block_after=36_000)
    assert requires_blocking_observation(36_000, threshold=30_000, block_after=36_000)
    assert requires_blocking_observation(30_000, threshold=30_000, block_after=None)


# --- §6.9 safe buffer prefix (§15 item 6) ------------------------------------------------------
def c(mid, at, *, pending=False, calls=()):
    return BufferCandidate(mid, at, frozenset(calls), pending)


def test_no_pending_call_buffers_everything_sorted():
    assert [m.message_id for m in safe_buffer_prefix([c("b", 20), c("a", 10)])] == ["a", "b"]


@pytest.mark.parametrize(("gap", "ids"), [(0, []), (1, []), (2, ["a"])])
def test_cursor_collision_defers(gap, ids):
    prefix = safe_buffer_prefix([c("a", 1_000), c("b", 1_000 + gap, pending=True, calls=["t1"])])
    assert [m.message_id for m in prefix] == ids


def test_split_tool_exchange_defers():
    assert safe_buffer_prefix([c("a", 10, calls=["t1"]), c("b", 100, pending=True, calls=["t1"])]) == ()


def test_several_newest_messages_with_a_pending_call_defer():
    assert safe_buffer_prefix([c("a", 10), c("b", 100), c("c", 100, pending=True, calls=["t"])]) == ()


def test_older_dangling_calls_are_buffered():
    prefix = safe_buffer_prefix([c("a", 10, pending=True, calls=["old"]), c("b", 50), c("c", 100)])
    assert [m.message_id for m in prefix] == ["a", "b", "c"]


def test_empty_candidates():
    assert safe_buffer_prefix([]) == ()
