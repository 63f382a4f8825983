"""Activation: the §6.4 worked example, §15 item 2 boundaries, §15 item 5 idle TTLs, provider change."""

from datetime import UTC, datetime, timedelta

import pytest

from omstream.engine.rules.activation import (
    Chunk,
    activation_trigger,
    auto_activation_ttl,
    choose_activation_boundary,
    did_provider_change,
    force_max_activation,
    idle_expired,
    is_stale_buffer_boundary,
    plan_activation,
    resolve_activation_ttl,
    to_epoch_ms,
)
from omstream.engine.rules.thresholds import resolve_activation_ratio, resolve_retention_floor

MIN = 60_000
HOUR = 60 * MIN


def chunks(*tokens):
    return tuple(
        Chunk(cycle_id=f"c{i}", message_tokens=t, observation_tokens=t // 10, message_ids=(f"m{i}a", f"m{i}b"))
        for i, t in enumerate(tokens)
    )


def boundary(ratio, threshold, pending, tokens, *, force_max=False):
    floor = threshold * (1 - resolve_activation_ratio(ratio, threshold))
    return choose_activation_boundary(tokens, retention_floor=floor, pending_tokens=pending, force_max=force_max)


# --- §6.4 worked example ------------------------------------------------------------------
def test_worked_example_activates_five_chunks():
    floor = resolve_retention_floor(0.8, 30_000)
    plan = plan_activation(chunks(6_100, 6_050, 6_200, 6_000, 3_100), retention_floor=floor, pending_tokens=30_500)
    assert floor == 6_000
    assert plan.target_tokens == 24_500
    assert plan.chunk_count == 5
    assert plan.message_tokens == 27_450
    # overshoot 2 950 ≤ 0.95 × 6 000 = 5 700, and 3 050 ≥ 1 000 tokens stay
    assert plan.message_tokens - plan.target_tokens == 2_950
    assert plan.remaining_tokens == 3_050
    assert plan.cycle_ids == ("c0", "c1", "c2", "c3", "c4")
    assert plan.observation_tokens == 610 + 605 + 620 + 600 + 310
    assert plan.message_ids[:3] == ("m0a", "m0b", "m1a")


def test_worked_example_under_boundary_is_four_chunks():
    # with a smaller floor the overshoot budget shrinks below 2 950 and the under boundary wins
    tokens = [6_100, 6_050, 6_200, 6_000, 3_100]
    assert choose_activation_boundary(tokens, retention_floor=3_000, pending_tokens=27_500) == 4


# --- §15 item 2: activation boundary ---------------------------------------------------------
def test_ratio_one_activates_everything():
    assert boundary(1, 3_000, 3_000, [1_000, 1_000, 1_000]) == 3


def test_ratio_0_8_prefers_close_over_boundary():
    assert boundary(0.8, 5_000, 6_000, [3_000, 2_000, 2_000]) == 2


def test_ratio_0_8_large_overshoot_falls_back_to_under():
    # target 5 000: two chunks overshoot by 1 000 > 950
    assert boundary(0.8, 5_000, 6_000, [2_000, 4_000]) == 1


def test_force_max_accepts_overshoot_when_context_survives():
    # ratio 0.5, threshold 50 000, pending 30 000: floor 25 000, target 5 000
    assert boundary(0.5, 50_000, 30_000, [4_000, 24_900], force_max=True) == 2  # leaves 1 100 ≥ 1 000
    assert boundary(0.5, 50_000, 30_000, [4_000, 24_900]) == 1


def test_all_boundaries_unsafe_still_activates_one_chunk():
    # over boundary overshoots and leaves < 1 000; no under boundary at all
    assert boundary(0.8, 5_000, 1_200, [1_500]) == 1
    # no boundary reaches the target and none holds tokens
    assert boundary(0.8, 5_000, 6_000, [0, 0]) == 1


def test_no_chunks_activate_nothing():
    plan = plan_activation((), retention_floor=6_000, pending_tokens=40_000)
    assert plan.chunk_count == 0 and plan.remaining_tokens == 40_000


def test_force_max_at_block_after():
    assert not force_max_activation(35_999, 36_000)
    assert force_max_activation(36_000, 36_000)
    assert not force_max_activation(99_999, None)


def test_stale_buffer_boundary():
    assert is_stale_buffer_boundary(2_999, 6_000)
    assert not is_stale_buffer_boundary(3_000, 6_000)
    assert not is_stale_buffer_boundary(0, 0)


# --- §6.4 step 3: triggers -------------------------------------------------------------------
T0 = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def test_trigger_priority_provider_then_ttl_then_threshold():
    common = {"has_chunks": True, "threshold": 30_000, "now": T0 + timedelta(minutes=6),
              "last_activity_at": T0, "idle_ttl_ms": 5 * MIN}
    assert activation_trigger(pending_tokens=40_000, activate_on_provider_change=True,
                              actor_model="openai/gpt-5", last_model="anthropic/claude-sonnet-4-5",
                              **common) == "provider_change"
    assert activation_trigger(pending_tokens=40_000, **common) == "ttl"
    assert activation_trigger(pending_tokens=30_000, **{**common, "idle_ttl_ms": None}) == "threshold"
    assert activation_trigger(pending_tokens=29_999, **{**common, "idle_ttl_ms": None}) is None
    assert activation_trigger(pending_tokens=40_000, **{**common, "has_chunks": False}) is None


def test_provider_change_needs_the_option():
    assert activation_trigger(has_chunks=True, pending_tokens=0, threshold=30_000,
                              actor_model="openai/gpt-5", last_model="google/gemini-2.5-flash") is None


def test_idle_gap_is_measured_in_event_time():
    assert idle_expired(T0 + timedelta(minutes=5), T0, 5 * MIN)
    assert not idle_expired(T0 + timedelta(minutes=5) - timedelta(milliseconds=1), T0, 5 * MIN)
    assert idle_expired(to_epoch_ms(T0) + HOUR, to_epoch_ms(T0), HOUR)
    assert not idle_expired(T0, None, 5 * MIN)
    assert not idle_expired(T0 + timedelta(days=9), T0, None)


@pytest.mark.parametrize(("actor", "last", "changed"), [
    ("openai/gpt-5", "openai/gpt-5", False),
    ("openai/gpt-5", "openai/gpt-5-mini", True),
    ("openai/gpt-5", "anthropic/gpt-5", True),
    ("openai/gpt-5", "openai.responses/gpt-5", False),  # sub-namespace counts as its base provider
    ("openai/gpt-5", "gpt-5", False),  # a bare id in history compares by id only
    ("openai/gpt-5", "gpt-4o", True),
    (None, "openai/gpt-5", False),
    ("openai/gpt-5", None, False),
])
def test_did_provider_change(actor, last, changed):
    assert did_provider_change(actor, last) is changed


# --- §15 item 5: activateAfterIdle ------------------------------------------------------------
def test_explicit_ttls_are_unchanged():
    assert resolve_activation_ttl(90_000, "openai/gpt-5") == 90_000
    assert resolve_activation_ttl(None, "openai/gpt-5") is None


@pytest.mark.parametrize(("model", "retention", "ttl"), [
    (None, None, 5 * MIN),
    ("unknown/x", None, 5 * MIN),
    ("openai/gpt-5.5", "24h", HOUR),
    ("openai/gpt-5.5", "in_memory", 5 * MIN),
    ("openai/gpt-4.1", None, 5 * MIN),
    ("openai/gpt-5-mini", None, 5 * MIN),
    ("openai/gpt-5.1-codex", None, 5 * MIN),
    ("openai/gpt-5.4-pro", None, 5 * MIN),
    ("openai/gpt-5.5", None, HOUR),
    ("openai/gpt-6", None, HOUR),
    ("openai.responses/gpt-6", None, HOUR),
    ("gpt-4o", None, 5 * MIN),  # bare litellm ids keep their provider's cache
    ("gpt-6", None, HOUR),
    ("anthropic/claude-sonnet-4-5", None, 5 * MIN),
    ("google/gemini-2.5-flash", None, 24 * HOUR),
    ("gemini/gemini-2.5-flash", None, 24 * HOUR),
    ("vertex_ai/gemini-2.5-flash", None, 24 * HOUR),
    ("gemini-2.5-flash", None, 24 * HOUR),
    ("deepseek/deepseek-chat", None, HOUR),
    ("groq/llama-3.3-70b", None, 2 * HOUR),
    ("xai/grok-4", None, 5 * MIN),
    ("openrouter/openai/gpt-5.5", None, 5 * MIN),
])
def test_auto_ttl_table(model, retention, ttl):
    assert auto_activation_ttl(model, prompt_cache_retention=retention) == ttl
    assert resolve_activation_ttl("auto", model, prompt_cache_retention=retention) == ttl


def test_auto_ttl_decides_idle_activation():
    ttl = resolve_activation_ttl("auto", "anthropic/claude-sonnet-4-5")
    assert activation_trigger(has_chunks=True, pending_tokens=0, threshold=30_000, idle_ttl_ms=ttl,
                              now=T0 + timedelta(minutes=5), last_activity_at=T0) == "ttl"
    ttl = resolve_activation_ttl("auto", "google/gemini-2.5-flash")
    assert activation_trigger(has_chunks=True, pending_tokens=0, threshold=30_000, idle_ttl_ms=ttl,
                              now=T0 + timedelta(hours=23), last_activity_at=T0) is None
