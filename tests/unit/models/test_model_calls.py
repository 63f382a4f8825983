"""Model jobs through the real litellm path (scripted provider; a real provider without its key).

Failures are injected by the scripted provider's test-only settings (`failWith`, `failTimes`,
`failModel`), which raise litellm's own exception types inside litellm's call path.
"""

import asyncio
import logging
import random
from datetime import UTC, datetime

import pytest

from omstream.engine.prompting.parsing import is_degenerate, parse_observer_output
from omstream.models.calls import (
    RetryPolicy,
    call_arguments,
    classify_error,
    complete,
    is_transient,
    run_job,
    translate_settings,
)
from omstream.models.scripted import reset_failures
from omstream.schemas.jobs import ChatMessage, ModelCall, ModelJob, request_hash
from omstream.settings import Settings


def job(model: str, settings: dict | None = None, *, fallbacks: tuple[str, ...] | None = None,
        provider_options: dict | None = None, kind: str = "observe") -> ModelJob:
    messages = (ChatMessage(role="system", content="answer with <current-task> too"),
                ChatMessage(role="user", content="## New Message History to Observe\n\nMar 3 2025:\n"
                                                 "User (9:05 AM): I moved to Lisbon last week"))
    settings = settings or {}
    return ModelJob(kind=kind, cycle_id="c1", memory_key="thread:t", thread_id="t", generation=0,
                    model=model, messages=messages, settings=settings, fallbacks=fallbacks,
                    provider_options=provider_options,
                    request_hash=request_hash(model, messages, settings, provider_options=provider_options,
                                              fallbacks=fallbacks),
                    created_at=datetime(2025, 3, 3, tzinfo=UTC))


class FakeSleep:
    def __init__(self):
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def run(j: ModelJob, policy: RetryPolicy = RetryPolicy(), sleep: FakeSleep | None = None):
    return asyncio.run(run_job(j, policy, rng=random.Random(7), sleep=sleep or FakeSleep()))


@pytest.fixture(autouse=True)
def _fresh_failure_counts():
    reset_failures()
    yield
    reset_failures()


# --- the happy path ---------------------------------------------------------------------------
def test_scripted_observer_answers_through_litellm():
    result = run(job("scripted/observer"))
    assert result.ok and result.attempts == 1 and result.model == "scripted/observer"
    assert result.error is None and result.error_code is None and result.error_status is None
    parsed = parse_observer_output(result.output)
    assert parsed.observations == "Date: Mar 3, 2025\n* 🔴 (09:05) User said: I moved to Lisbon last week"
    assert parsed.current_task.startswith("Primary:")


def test_usage_and_provider_metadata_are_filled():
    result = run(job("scripted/observer"))
    usage = result.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    meta = result.provider_metadata["litellm"]
    assert meta["provider"] == "scripted" and meta["model"] == "scripted/observer"
    assert meta["responseId"] and meta["finishReason"] == "stop"
    assert result.wire()["providerMetadata"] == result.provider_metadata  # travels on the wire


def test_word_limits_are_model_settings():
    result = run(job("scripted/observer", {"userWords": 2}))
    assert "User said: I moved ..." in result.output


# --- settings and provider options -------------------------------------------------------------
def test_camel_case_settings_become_litellm_arguments_and_unknown_keys_pass_through():
    assert translate_settings({
        "maxOutputTokens": 100_000, "temperature": 0.3, "topP": 0.9, "topK": 40,
        "presencePenalty": 0.1, "frequencyPenalty": 0.2, "stopSequences": ["END"], "seed": 3,
        "userWords": 5, "maxRetries": 2, "max_tokens_custom": 1,
    }) == {
        "max_tokens": 100_000, "temperature": 0.3, "top_p": 0.9, "top_k": 40,
        "presence_penalty": 0.1, "frequency_penalty": 0.2, "stop": ["END"], "seed": 3,
        "userWords": 5, "max_tokens_custom": 1,
    }


def test_translated_settings_reach_the_provider_through_litellm():
    result = run(job("scripted/observer", {"maxOutputTokens": 500, "temperature": 0.3, "topP": 0.5,
                                           "assistantWords": 3, "userWords": 3}))
    assert result.ok and "User said: I moved to ..." in result.output


def test_provider_options_go_only_to_their_provider(caplog):
    google = {"google": {"thinkingConfig": {"thinkingBudget": 215}}}
    gemini = job("google/gemini-2.5-flash", {"maxOutputTokens": 100}, provider_options=google)
    assert call_arguments(gemini, "gemini/gemini-2.5-flash") == {
        "max_tokens": 100, "thinkingConfig": {"thinkingBudget": 215}}
    openai = {"openai": {"reasoningEffort": "low", "serviceTier": "flex"},
              "anthropic": {"thinking": {"type": "enabled", "budgetTokens": 1024}}}
    assert call_arguments(job("openai/gpt-5-mini", provider_options=openai), "openai/gpt-5-mini") == {
        "reasoning_effort": "low", "service_tier": "flex"}
    assert call_arguments(job("anthropic/claude-sonnet-4-5", provider_options=openai),
                          "anthropic/claude-sonnet-4-5") == {
        "thinking": {"type": "enabled", "budget_tokens": 1024}}
    with caplog.at_level(logging.DEBUG, logger="omstream.models.calls"):
        assert call_arguments(job("scripted/observer", provider_options=google), "scripted/observer") == {}
    assert any("not sent" in r.getMessage() for r in caplog.records)


def test_litellm_puts_gemini_provider_options_into_the_request():
    from litellm.utils import get_optional_params

    params = get_optional_params(model="gemini-2.5-flash", custom_llm_provider="gemini",
                                 **call_arguments(job("google/gemini-2.5-flash", {"maxOutputTokens": 100},
                                                      provider_options={"google": {"thinkingConfig": {
                                                          "thinkingBudget": 215}}}),
                                                  "gemini/gemini-2.5-flash"))
    assert params["thinkingConfig"] == {"thinkingBudget": 215}
    assert params["max_output_tokens"] == 100


def test_provider_options_reach_the_provider_through_litellm():
    options = {"scripted": {"userWords": 2}, "google": {"thinkingConfig": {"thinkingBudget": 215}}}
    result = run(job("scripted/observer", provider_options=options))
    assert result.ok and "User said: I moved ..." in result.output


# --- §7.7 retries --------------------------------------------------------------------------------
def test_retry_policy_defaults_are_the_originals():
    policy = RetryPolicy()
    assert (policy.retries, policy.base_ms, policy.cap_ms, policy.jitter) == (8, 1000.0, 120_000.0, 0.2)
    rng = random.Random(1)
    nominal = [1, 2, 4, 8, 16, 32, 64, 120, 120]
    for attempt, seconds in enumerate(nominal):
        for _ in range(50):
            assert seconds * 0.8 <= policy.delay(attempt, rng) <= seconds * 1.2
    delays = {round(policy.delay(0, rng), 6) for _ in range(20)}
    assert len(delays) > 1  # jittered


def test_retry_policy_comes_from_settings_and_rejects_nonsense():
    policy = RetryPolicy.from_settings(Settings(model_retries=2, retry_base_ms=5.0))
    assert (policy.retries, policy.base_ms, policy.cap_ms) == (2, 5.0, 120_000.0)
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)
    with pytest.raises(ValueError):
        RetryPolicy(jitter=1.5)


@pytest.mark.parametrize("fail_with, code, status", [
    ("429", "rate-limited", 429),
    ("500", "server-error", 500),
    ("503", "server-error", 503),
    ("timeout", "timeout", None),
    ("connection", "server-error", None),
])
def test_transient_failures_are_retried_with_bounded_jittered_back_off(fail_with, code, status):
    sleep = FakeSleep()
    policy = RetryPolicy(retries=4, base_ms=10, cap_ms=25)
    result = run(job("scripted/observer", {"failWith": fail_with, "failTimes": 3}), policy, sleep)
    assert result.ok and result.attempts == 4 and result.error is None
    assert len(sleep.delays) == 3
    for attempt, seconds in enumerate(sleep.delays):
        nominal = min(10 * 2**attempt, 25) / 1000
        assert nominal * 0.8 <= seconds <= nominal * 1.2

    # the same failures past the retry budget: a failed result with the code and status
    reset_failures()
    failed = run(job("scripted/observer", {"failWith": fail_with}), RetryPolicy(retries=2, base_ms=1))
    assert not failed.ok and failed.attempts == 3 and failed.output is None
    assert (failed.error_code, failed.error_status) == (code, status)
    assert "scripted failure" in failed.error


@pytest.mark.parametrize("fail_with, code", [("401", "auth"), ("400", "bad-request")])
def test_permanent_failures_are_not_retried(fail_with, code):
    sleep = FakeSleep()
    result = run(job("scripted/observer", {"failWith": fail_with, "failTimes": 1}), RetryPolicy(retries=5), sleep)
    assert not result.ok and result.attempts == 1 and sleep.delays == []
    assert result.error_code == code and result.error_status == int(fail_with)


def test_max_retries_setting_overrides_the_policy():
    result = run(job("scripted/observer", {"failWith": "500", "maxRetries": 1}), RetryPolicy(retries=8, base_ms=1))
    assert not result.ok and result.attempts == 2


def test_error_classification_of_plain_exceptions():
    class HttpError(Exception):
        def __init__(self, status, text="boom"):
            super().__init__(text)
            self.status_code = status

    assert classify_error(HttpError(404)) == ("bad-request", 404)
    assert classify_error(HttpError(403)) == ("auth", 403)
    assert classify_error(HttpError(502)) == ("server-error", 502)
    assert classify_error(TimeoutError()) == ("timeout", None)
    assert classify_error(ConnectionResetError("reset")) == ("server-error", None)
    assert classify_error(RuntimeError("something odd")) == ("unknown", None)
    assert not is_transient(HttpError(400, "request timed out upstream"))  # 4xx wins over words
    assert not is_transient(HttpError(401)) and not is_transient(HttpError(404))
    undici = RuntimeError("boom")
    undici.code = "UND_ERR_SOCKET"
    assert is_transient(undici) and is_transient(TimeoutError())


# --- fallbacks (§13 ModelWithRetries lists) -----------------------------------------------------
def test_fallback_answers_after_the_first_model_exhausts_its_retries():
    sleep = FakeSleep()
    settings = {"failWith": "500", "failModel": "scripted/observer"}
    result = run(job("scripted/observer", settings, fallbacks=("scripted/observer-b",)),
                 RetryPolicy(retries=2, base_ms=1), sleep)
    assert result.ok and result.model == "scripted/observer-b"
    assert result.attempts == 4  # 3 of the first model, 1 of the fallback
    assert len(sleep.delays) == 2


def test_fallback_after_a_permanent_failure_and_after_a_missing_key(monkeypatch):
    result = run(job("scripted/poet", fallbacks=("scripted/poet", "scripted/observer")), RetryPolicy(retries=3))
    assert result.ok and result.model == "scripted/observer" and result.attempts == 2
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = run(job("google/gemini-2.5-flash", fallbacks=("scripted/observer",)))
    assert result.ok and result.model == "scripted/observer" and result.attempts == 1


def test_every_model_failing_reports_each_error_and_the_last_code():
    result = run(job("scripted/observer", {"failWith": "429", "failModel": "observer"},
                     fallbacks=("scripted/poet",)), RetryPolicy(retries=1, base_ms=1))
    assert not result.ok and result.attempts == 3 and result.model == "scripted/poet"
    assert "scripted/observer: RateLimitError" in result.error and "scripted/poet: BadRequestError" in result.error
    assert (result.error_code, result.error_status) == ("bad-request", 400)


def test_real_provider_without_key_fails_naming_the_key(monkeypatch):
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = run(job("google/gemini-2.5-flash"), RetryPolicy(retries=0))
    assert not result.ok and result.attempts == 0
    assert "GEMINI_API_KEY" in result.error and result.error_code == "missing-key"


def test_unknown_scripted_model_is_a_failed_result_not_an_exception():
    result = run(job("scripted/poet"), RetryPolicy(retries=0))
    assert not result.ok and "observer, reflector or assistant" in result.error
    assert result.error_code == "bad-request"


def test_the_scripted_assistant_answers_a_context_windows_chat_through_litellm():
    """examples/agent_loop.py's offline model: it echoes the last user message and counts the
    observation bullets of the window's system prompt, so the memory is seen reaching it."""
    chat = [{"role": "system", "content": "<observations>\nDate: Mar 3, 2025\n* 🔴 (09:05) User lives in Lisbon\n"
                                          "* 🟡 (09:06) User likes tea\n</observations>"},
            {"role": "user", "content": "Where do I live?"}]
    answer = asyncio.run(complete("scripted/assistant", chat, timeout=10, arguments={}))
    assert answer.choices[0].message.content == "Noted: Where do I live? (I remember 2 observations.)"
    # Every message observed: the window ends with the continuation reminder, not a user message.
    chat[-1] = {"role": "user", "content": "<system-reminder>This conversation is already under way</system-reminder>"}
    answer = asyncio.run(complete("scripted/assistant", chat, timeout=10, arguments={}))
    assert answer.choices[0].message.content == "Noted, all in my observations. (I remember 2 observations.)"


# --- injected answers ---------------------------------------------------------------------------
def test_malformed_and_degenerate_answers_are_injectable_and_deterministic():
    malformed = run(job("scripted/observer", {"failWith": "malformed", "failTimes": 1}))
    assert malformed.ok and parse_observer_output(malformed.output).observations == ""
    again = run(job("scripted/observer", {"failWith": "malformed", "failTimes": 1}))
    assert "User said" in again.output  # the second call of the same request answers normally
    degenerate = run(job("scripted/observer", {"failWith": "degenerate"}))
    assert len(degenerate.output) >= 2000 and is_degenerate(degenerate.output)
    assert parse_observer_output(degenerate.output).degenerate
    reflector = run(job("scripted/reflector", {"failWith": "degenerate"}, kind="reflect"))
    assert is_degenerate(reflector.output)


def test_unknown_fail_with_is_a_bad_request():
    result = run(job("scripted/observer", {"failWith": "gremlins"}), RetryPolicy(retries=3))
    assert not result.ok and result.attempts == 1 and "gremlins" in result.error


# --- a model list whose entries set their own options (ModelWithRetries) --------------------------
def listed(*entries: ModelCall, settings: dict | None = None) -> ModelJob:
    base = job(entries[0].model, settings)
    return base.model_copy(update={"models": entries, "request_hash": request_hash(
        base.model, base.messages, base.settings, models=entries)})


def test_each_entry_of_a_model_list_is_called_with_its_own_retries_settings_options_and_headers(monkeypatch):
    import omstream.models.calls as calls

    made: list[tuple[str, dict]] = []
    real = calls.complete

    async def recording(model, messages, *, timeout, arguments, gate=None, num_retries=0):
        made.append((model, arguments))
        return await real(model, messages, timeout=timeout, arguments=arguments, gate=gate)

    monkeypatch.setattr(calls, "complete", recording)
    first = ModelCall(model="scripted/observer", id="primary", max_retries=1,
                      settings={"failWith": "500", "failModel": "scripted/observer", "temperature": 0.9})
    second = ModelCall(model="scripted/observer-b", id="backup", settings={"topP": 0.5},
                       provider_options={"openai": {"user": "x"}}, headers={"x-route": "eu"})
    result = run(listed(first, second, settings={"temperature": 0.1}), RetryPolicy(retries=6, base_ms=1))
    assert result.ok and result.model == "scripted/observer-b" and result.attempts == 3  # 2 + 1, not 7 + 1
    assert [m for m, _ in made] == ["scripted/observer"] * 2 + ["scripted/observer-b"]
    assert made[0][1]["temperature"] == 0.9 and "extra_headers" not in made[0][1]
    assert made[2][1]["temperature"] == 0.1 and made[2][1]["top_p"] == 0.5  # the entry's over the job's
    assert made[2][1]["extra_headers"] == {"x-route": "eu"}
    assert result.provider_metadata["omstream"] == {"modelId": "backup"}


def test_a_model_list_with_its_own_options_reaches_the_job_and_its_hash():
    from tests.helpers import engine, until_a_job

    plain = engine(300, observation={"model": [{"model": "scripted/observer"}, {"model": "scripted/observer-b"}]})
    own = engine(300, observation={"model": [{"model": "scripted/observer", "id": "a", "maxRetries": 0},
                                             {"model": "scripted/observer-b", "enabled": False},
                                             {"model": "scripted/observer-c", "headers": {"x": "y"}}]})

    def first_job(config):
        return until_a_job(config)[1].jobs[0]

    old = first_job(plain)
    assert old.models is None and old.fallbacks == ("scripted/observer-b",)  # hashed as it always was
    assert old.request_hash == request_hash(old.model, old.messages, old.settings,
                                            provider_options=old.provider_options, fallbacks=old.fallbacks)
    new = first_job(own)
    assert new.fallbacks is None and [(m.model, m.id, m.max_retries, m.headers) for m in new.models] == [
        ("scripted/observer", "a", 0, {}), ("scripted/observer-c", None, None, {"x": "y"})]
    assert new.request_hash != request_hash(new.model, new.messages, new.settings,
                                            provider_options=new.provider_options)
