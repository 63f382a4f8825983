"""Model jobs through the real litellm path (scripted provider; a real provider without its key)."""

import asyncio
from datetime import datetime, timezone

from schemas.jobs import ChatMessage, ModelJob, request_hash
from streams.engine.parsing import parse_observer_output
from streams.models.calls import RetryPolicy, run_job


def job(model: str, settings: dict | None = None) -> ModelJob:
    messages = (ChatMessage(role="system", content="answer with <current-task> too"),
                ChatMessage(role="user", content="## New Message History to Observe\n\nMar 3 2025:\n"
                                                 "User (9:05 AM): I moved to Lisbon last week"))
    settings = settings or {}
    return ModelJob(kind="observe", cycle_id="c1", memory_key="thread:t", thread_id="t", generation=0,
                    model=model, messages=messages, settings=settings,
                    request_hash=request_hash(model, messages, settings),
                    created_at=datetime(2025, 3, 3, tzinfo=timezone.utc))


def test_scripted_observer_answers_through_litellm():
    result = asyncio.run(run_job(job("scripted/observer")))
    assert result.ok and result.attempts == 1
    parsed = parse_observer_output(result.output)
    assert parsed.observations == "Date: Mar 3, 2025\n* 🔴 (09:05) User said: I moved to Lisbon last week"
    assert parsed.current_task.startswith("Primary:")
    assert result.usage.total_tokens > 0


def test_word_limits_are_model_settings():
    result = asyncio.run(run_job(job("scripted/observer", {"userWords": 2})))
    assert "User said: I moved ..." in result.output


def test_real_provider_without_key_fails_naming_the_key(monkeypatch):
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = asyncio.run(run_job(job("google/gemini-2.5-flash"), RetryPolicy(retries=0)))
    assert not result.ok and result.attempts == 0
    assert "GEMINI_API_KEY" in result.error


def test_unknown_scripted_model_is_a_failed_result_not_an_exception():
    result = asyncio.run(run_job(job("scripted/poet"), RetryPolicy(retries=0)))
    assert not result.ok and "observer or reflector" in result.error
