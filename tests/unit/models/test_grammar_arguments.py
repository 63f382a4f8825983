"""The answer's grammar on its way to a model: to a local model in the request body, to no other
model (a hosted fallback of a local job included), never beside a JSON `response_format`."""

import asyncio
import random
from datetime import UTC, datetime
from types import SimpleNamespace

from omstream.models import calls, local
from omstream.models.calls import RetryPolicy, call_arguments, run_job
from omstream.schemas.jobs import ChatMessage, ModelJob, request_hash

GRAMMAR = 'root ::= "<observations>\\n" [^<]+ "</observations>"'


def job(model: str, settings: dict, fallbacks: tuple[str, ...] | None = None) -> ModelJob:
    messages = (ChatMessage(role="system", content="observe"), ChatMessage(role="user", content="hi"))
    return ModelJob(kind="observe", cycle_id="c1", memory_key="thread:t", thread_id="t", generation=0,
                    model=model, messages=messages, settings=settings, fallbacks=fallbacks,
                    request_hash=request_hash(model, messages, settings, fallbacks=fallbacks),
                    created_at=datetime(2025, 3, 3, tzinfo=UTC))


def test_only_a_local_model_is_sent_the_grammar():
    settings = {"grammar": GRAMMAR, "maxOutputTokens": 300}
    assert call_arguments(job(local.DEFAULT_MODEL, settings), local.DEFAULT_MODEL)["grammar"] == GRAMMAR
    for hosted in ("openai/gpt-4o-mini", "gemini/gemini-2.5-flash", "scripted/observer"):
        arguments = call_arguments(job(local.DEFAULT_MODEL, settings), hosted)
        assert "grammar" not in arguments and arguments["max_tokens"] == 300


def test_the_local_route_puts_the_grammar_in_the_request_body(monkeypatch):
    monkeypatch.setitem(local._servers, "qwen2.5-1.5b", local._Running(None, "http://127.0.0.1:1/v1"))
    _, args = asyncio.run(local.route(local.DEFAULT_MODEL, {"grammar": GRAMMAR, "max_tokens": 64}))
    assert args["extra_body"] == {"repeat_penalty": 1.15, "grammar": GRAMMAR} and "grammar" not in args
    # An empty grammar (a user's way to turn it off) is not sent; nor is one beside a JSON schema,
    # which llama.cpp refuses together and constrains by itself.
    _, args = asyncio.run(local.route(local.DEFAULT_MODEL, {"grammar": ""}))
    assert "grammar" not in args["extra_body"] and "grammar" not in args
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    _, args = asyncio.run(local.route(local.DEFAULT_MODEL, {"grammar": GRAMMAR, "response_format": schema}))
    assert "grammar" not in args["extra_body"] and args["response_format"] == schema


def test_a_hosted_fallback_of_a_local_job_is_called_without_the_grammar(monkeypatch):
    seen: list[tuple[str, dict]] = []

    class Refused(RuntimeError):
        status_code = 400  # permanent: the fallback is tried at once

    async def complete(model, messages, *, timeout, arguments, num_retries=0, gate=None):
        seen.append((model, dict(arguments)))
        if local.is_local(model):
            raise Refused("bad request")
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content="ok"), finish_reason="stop")],
                               usage=None, id="r1")

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setattr(calls, "complete", complete)
    result = asyncio.run(run_job(job(local.DEFAULT_MODEL, {"grammar": GRAMMAR}, fallbacks=("openai/gpt-4o-mini",)),
                                 RetryPolicy(retries=0), rng=random.Random(1)))
    assert result.ok and result.model == "openai/gpt-4o-mini", result.error
    assert [m for m, _ in seen] == [local.DEFAULT_MODEL, "openai/gpt-4o-mini"]
    assert seen[0][1]["grammar"] == GRAMMAR and "grammar" not in seen[1][1]
