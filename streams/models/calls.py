"""Running a `ModelJob` through litellm and answering with a `ModelResult`.

This is the only module that imports litellm (3-5 s to import, so lazily).

- **Retries (§7.7)**: a call is retried on transient errors (network words, timeouts, HTTP
  408/425/429/5xx, `UND_ERR_*` codes, `isRetryable`) with exponential back-off
  `min(base * 2**k, cap)` and ±20 % jitter, at most `RetryPolicy.retries` times (8 by default:
  9 attempts, about 247 s).  HTTP 400/401/403/404/422 are never retried, whatever their text.
  A rate-limited call waits at least what the provider's `Retry-After` asks (up to the cap), and
  the model's calls at once narrow meanwhile (`omstream.models.admission.ModelGate`).
- **Fallbacks (§13, `ModelWithRetries` lists)**: when the model still fails after its retries,
  or fails permanently (including a missing API key), each of `job.fallbacks` is tried in
  order with the same policy; a list whose entries set their own `maxRetries`, `modelSettings`,
  `providerOptions`, `headers` or `id` comes as `job.models`, each entry called with its own.
  The result names the model that answered (and the entry's id, `providerMetadata.omstream.
  modelId`); `attempts` counts every attempt of every model.
- **Settings** are the original's camelCase call settings (`maxOutputTokens` → `max_tokens`,
  `topP` → `top_p`, ...); keys without a translation pass through as they are (the scripted
  provider reads `userWords`, `assistantWords`, ...).  `maxRetries` overrides the policy's
  retries for the job.
- **Provider options** (`{google = {thinkingConfig = {...}}}`) are sent only to a model of that
  provider, as extra litellm arguments: litellm copies provider-specific arguments into the
  provider's request (for Gemini, `thinkingConfig` lands in `generationConfig` as written).
  For OpenAI-style providers the AI SDK's camelCase names become litellm's snake_case ones
  (`reasoningEffort` → `reasoning_effort`, `thinking.budgetTokens` → `thinking.budget_tokens`).
  Options for another provider are dropped (logged at debug).
- **Errors** are classified into `error_code` (`timeout`, `rate-limited`, `server-error`,
  `auth`, `bad-request`, `missing-key`, `unknown`) and `error_status` (the HTTP status, when
  there was an HTTP answer).
- **Usage and provider metadata** come from the litellm response (`usage`, `_hidden_params`
  with litellm's `response_cost`, `provider_specific_fields`).
- **Attachments** (a user message of content parts: text, `image_url`, `file`) are passed to
  litellm as they are.  When a model refuses such a request (`bad-request`: a link that expired,
  a file type the provider does not read, a text-only endpoint), it is asked once more without
  the attachments and the text parts naming them: the transcript still names every attachment,
  and an observer that never answers would leave the memory unobserved for good.  The result
  says so (`providerMetadata.omstream.attachmentsDropped`).

The result is never invented: it is the model's answer or the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType
from typing import Any, Literal

import orjson

from omstream.schemas.jobs import ModelCall, ModelJob, ModelResult, Usage

from . import local
from .admission import ModelGate, causes, queued, retry_after

__all__ = [
    "ErrorCode",
    "RetryPolicy",
    "call_arguments",
    "classify_error",
    "complete",
    "is_transient",
    "litellm_model_name",
    "model_provider",
    "run_job",
    "translate_settings",
    "untimed",
    "warm_up",
    "without_attachments",
]

log = logging.getLogger(__name__)

_TRANSIENT_TEXT = (
    "terminated", "fetch failed", "econnreset", "econnrefused", "enotfound", "eai_again",
    "socket hang up", "network error", "request timed out", "request timeout",
    "connection reset", "connection closed", "timed out",
)
# HTTP statuses that are the caller's fault: retrying cannot help, whatever the message says.
_PERMANENT_STATUS = frozenset({400, 401, 403, 404, 422})
# The original's provider/model names that litellm spells differently.
_PROVIDER_PREFIXES = {"google/": "gemini/"}

#: What kind of failure a failed result is.
ErrorCode = Literal["timeout", "rate-limited", "server-error", "auth", "bad-request", "missing-key",
                   "unknown"]

# The original's call settings (AI SDK `CallSettings`) by litellm's (OpenAI's) names.
_SETTING_NAMES = {
    "maxOutputTokens": "max_tokens",
    "maxTokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "topP": "top_p",
    "topK": "top_k",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
    "stopSequences": "stop",
    "headers": "extra_headers",
}
# Settings that steer this module, not the provider.
_RETRY_SETTINGS = ("maxRetries", "max_retries")

# providerOptions keys (the AI SDK's provider names) that apply to each litellm provider.
_OPTION_KEYS = {
    "gemini": ("google", "gemini"),
    "vertex_ai": ("google", "vertex", "vertex_ai"),
    "vertex_ai_beta": ("google", "vertex", "vertex_ai"),
    "azure": ("openai", "azure"),
}
# Providers whose litellm arguments are OpenAI-style snake_case names.
_SNAKE_CASE_PROVIDERS = frozenset({
    "openai", "azure", "anthropic", "xai", "groq", "mistral", "deepseek", "openrouter",
    "together_ai", "fireworks_ai", "cerebras",
})
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


@dataclass(frozen=True)
class RetryPolicy:
    """§7.7: back-off `min(base * 2**k, cap)` ms with ±`jitter` (20 %), at most `retries` retries.

    The defaults are the original's `withRetry`: 8 retries (9 attempts), 1 s doubling to 120 s.
    """

    retries: int = 8
    base_ms: float = 1000.0
    cap_ms: float = 120_000.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.retries < 0 or self.base_ms < 0 or self.cap_ms < 0 or not 0 <= self.jitter < 1:
            raise ValueError(f"invalid retry policy {self!r}: retries, base_ms and cap_ms must be "
                             ">= 0 and jitter in [0, 1)")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after failed attempt `attempt` (0-based)."""
        raw: float = min(self.base_ms * 2**attempt, self.cap_ms)
        return raw * rng.uniform(1 - self.jitter, 1 + self.jitter) / 1000.0

    @classmethod
    def from_settings(cls, settings: Any) -> RetryPolicy:
        """From runtime settings: `model_retries`, `retry_base_ms` and, when the settings have
        them, `retry_cap_ms` and `retry_jitter`."""
        default = cls()
        return cls(
            retries=int(getattr(settings, "model_retries", default.retries)),
            base_ms=float(getattr(settings, "retry_base_ms", default.base_ms)),
            cap_ms=float(getattr(settings, "retry_cap_ms", default.cap_ms)),
            jitter=float(getattr(settings, "retry_jitter", default.jitter)),
        )


def warm_up() -> None:
    """Import litellm (seconds) before the first job, so the first cycle is not the slow one."""
    _litellm()


def _litellm() -> ModuleType:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import litellm

    from .scripted import register

    litellm.suppress_debug_info = True
    register()
    return litellm


def litellm_model_name(model: str) -> str:
    for prefix, replacement in _PROVIDER_PREFIXES.items():
        if model.startswith(prefix):
            return replacement + model[len(prefix):]
    return model


def model_provider(model: str) -> str:
    """litellm's provider of a (litellm) model name: `gemini`, `openai`, `scripted`, ..."""
    if model.startswith("scripted/"):
        return "scripted"
    if local.is_local(model):
        return "local"
    try:
        provider: str = _litellm().get_llm_provider(model)[1]
        return provider
    except Exception:  # noqa: BLE001 - an unknown provider is reported by the call itself
        return model.split("/", 1)[0] if "/" in model else "unknown"


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        status = getattr(exc, "code", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def is_transient(exc: BaseException) -> bool:
    """The original's retry test: network words, `UND_ERR_*`, HTTP 408/425/429/5xx,
    `isRetryable`, searched through causes.  A 400/401/403/404/422 answer is never transient."""
    if _status(exc) in _PERMANENT_STATUS:
        return False
    for current in causes(exc):
        if isinstance(current, (TimeoutError, ConnectionError)):
            return True
        status = _status(current)
        if status is not None and (status in (408, 425, 429) or 500 <= status < 600):
            return True
        code = getattr(current, "code", None)
        if isinstance(code, str) and code.startswith("UND_ERR_"):
            return True
        if getattr(current, "is_retryable", False) is True or getattr(current, "isRetryable", False) is True:
            return True
        text = str(current).lower()
        if any(word in text for word in _TRANSIENT_TEXT):
            return True
    return False


def classify_error(exc: BaseException) -> tuple[ErrorCode, int | None]:
    """`(error_code, error_status)` of a failed call; the status only when an HTTP answer came."""
    try:
        from litellm.exceptions import APIConnectionError, Timeout
        no_answer: tuple[type, ...] = (Timeout, APIConnectionError)
        timeouts: tuple[type, ...] = (Timeout,)
    except ImportError:  # pragma: no cover - litellm is a dependency
        no_answer, timeouts = (), ()
    chain = list(causes(exc))
    if any(isinstance(e, (*timeouts, TimeoutError, asyncio.TimeoutError)) for e in chain):
        return "timeout", None
    status = next((s for s in map(_status, chain) if s is not None and 100 <= s <= 599), None)
    if isinstance(exc, no_answer) or any(isinstance(e, ConnectionError) for e in chain):
        return "server-error", None
    if status == 408:
        return "timeout", status
    if status == 429:
        return "rate-limited", status
    if status in (401, 403):
        return "auth", status
    if status is not None and 400 <= status < 500:
        return "bad-request", status
    if status is not None and 500 <= status < 600:
        return "server-error", status
    text = str(exc).lower()
    if "timed out" in text or "timeout" in text:
        return "timeout", None
    if is_transient(exc):
        return "server-error", None
    return "unknown", None


def _missing_keys(litellm: ModuleType, model: str) -> list[str]:
    if model.startswith("scripted/") or local.is_local(model):
        return []
    try:
        report = litellm.validate_environment(model=model)
    except Exception:  # noqa: BLE001 - an unknown provider is reported by the call itself
        return []
    return list(report.get("missing_keys") or [])


def translate_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The original's camelCase model settings as litellm arguments; unknown keys as they are."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in _RETRY_SETTINGS or value is None:
            continue
        out[_SETTING_NAMES.get(key, key)] = value
    return out


def _snake(name: str) -> str:
    return _CAMEL.sub(r"_\1", name).lower()


def _snake_options(options: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in options.items():
        name = _snake(key)
        if name == "thinking" and isinstance(value, Mapping):
            value = {_snake(k): v for k, v in value.items()}
        out[name] = value
    return out


def provider_arguments(model: str, provider_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The job's provider options that apply to `model`, as extra litellm arguments."""
    if not provider_options:
        return {}
    provider = model_provider(model)
    keys = _OPTION_KEYS.get(provider, (provider,))
    out: dict[str, Any] = {}
    for key, options in provider_options.items():
        if key not in keys:
            log.debug("provider options for %r not sent to %s (provider %s)", key, model, provider)
            continue
        if not isinstance(options, Mapping):
            log.debug("provider options for %r are not an object; not sent", key)
            continue
        out.update(_snake_options(options) if provider in _SNAKE_CASE_PROVIDERS else dict(options))
    return out


def call_arguments(job: ModelJob, model: str, entry: ModelCall | None = None) -> dict[str, Any]:
    """Every litellm argument of a call of `job` to `model` besides model/messages/timeout; a
    model-list `entry` brings its settings (over the job's), provider options (instead of the
    job's) and headers.

    The answer's `grammar` (a GBNF for llama.cpp, set on a local model's Observer and Reflector
    jobs) goes to a local model only: a hosted model, a local job's fallback among them, would
    refuse or ignore an argument it does not know."""
    settings, options = job.settings, job.provider_options
    if entry is not None:
        settings = {**settings, **entry.settings}
        options = entry.provider_options if entry.provider_options is not None else options
    arguments = {**translate_settings(settings), **provider_arguments(model, options)}
    if entry is not None and entry.headers:
        arguments["extra_headers"] = {**arguments.get("extra_headers", {}), **entry.headers}
    if not local.is_local(model):
        arguments.pop("grammar", None)
    return arguments


def _retries(job: ModelJob, policy: RetryPolicy, entry: ModelCall | None = None) -> int:
    if entry is not None and entry.max_retries is not None:
        return entry.max_retries
    for key in _RETRY_SETTINGS:
        value = job.settings.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return policy.retries


def _candidates(job: ModelJob) -> list[tuple[str, ModelCall | None]]:
    """The models a job tries in order (litellm names), each with its model-list entry: the
    job's `models`, else its `model` and then `fallbacks` (a name listed twice is tried once)."""
    if job.models:
        return [(litellm_model_name(entry.model), entry) for entry in job.models]
    names = [litellm_model_name(job.model)]
    names += [m for m in (litellm_model_name(f) for f in job.fallbacks or ()) if m not in names]
    return [(name, None) for name in names]


def _jsonable(value: Any) -> Any:
    try:
        return orjson.loads(orjson.dumps(value, default=str))
    except (TypeError, orjson.JSONEncodeError):
        return None


def _usage(response: Any) -> Usage | None:
    usage = getattr(response, "usage", None)
    if not usage:
        return None

    def count(name: str) -> int | None:
        value = getattr(usage, name, None)
        return value if isinstance(value, int) and value >= 0 else None

    return Usage(input_tokens=count("prompt_tokens"), output_tokens=count("completion_tokens"),
                 total_tokens=count("total_tokens"))


def _provider_metadata(response: Any, provider: str) -> dict[str, Any] | None:
    """What litellm tells about the call: provider, model, response id, cost (litellm's
    `response_cost`, USD, when it knows the price), latency, reasoning/cached tokens, and
    the provider's own fields (`provider_specific_fields`) under the provider's name."""
    hidden = getattr(response, "_hidden_params", None) or {}
    usage = getattr(response, "usage", None)
    details = getattr(usage, "completion_tokens_details", None)
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    choices = getattr(response, "choices", None) or []
    info: dict[str, Any] = {
        "provider": hidden.get("custom_llm_provider") or provider,
        "model": getattr(response, "model", None),
        "responseId": getattr(response, "id", None),
        "cost": hidden.get("response_cost"),
        "latencyMs": hidden.get("_response_ms"),
        "finishReason": getattr(choices[0], "finish_reason", None) if choices else None,
        "reasoningTokens": getattr(details, "reasoning_tokens", None),
        "cachedInputTokens": getattr(prompt_details, "cached_tokens", None),
    }
    metadata: dict[str, Any] = {"litellm": {k: v for k, v in info.items() if v is not None}}
    specific = getattr(response, "provider_specific_fields", None)
    if isinstance(specific, Mapping) and specific:
        metadata[provider] = dict(specific)
    plain: dict[str, Any] | None = _jsonable(metadata)
    return plain


@dataclass
class _Failure:
    model: str
    error: str
    code: ErrorCode
    status: int | None


def _result(job: ModelJob, started: datetime, *, ok: bool, model: str, attempts: int,
            output: str | None = None, failure: _Failure | None = None, error: str | None = None,
            usage: Usage | None = None, metadata: dict[str, Any] | None = None) -> ModelResult:
    return ModelResult(
        kind=job.kind, cycle_id=job.cycle_id, memory_key=job.memory_key, thread_id=job.thread_id,
        request_hash=job.request_hash, ok=ok, output=output,
        error=error if error is not None else (failure.error if failure else None),
        error_code=failure.code if failure else None, error_status=failure.status if failure else None,
        model=model, attempts=attempts, usage=usage, provider_metadata=metadata,
        started_at=started, completed_at=datetime.now(UTC),
        version=job.version, config_digest=job.config_digest,
    )


def untimed(result: ModelResult, job: ModelJob) -> ModelResult:
    """The result stamped as taking no time (starting and ending when the job was made): a
    settled run (`om simulate`, a settled replay) then writes the same log however long the
    model took."""
    return result.model_copy(update={"started_at": job.created_at, "completed_at": job.created_at})


def without_attachments(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """`messages` without their non-text content parts and the text part just before each (the
    one naming it); a message left with one text part becomes that string.  None when no
    message has a non-text part."""
    changed = False
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list) or all(p.get("type") == "text" for p in content):
            out.append(message)
            continue
        changed = True
        kept = [p for i, p in enumerate(content) if p.get("type") == "text"
                and not (i + 1 < len(content) and content[i + 1].get("type") != "text")]
        texts = [p for p in kept if p.get("text")]
        out.append({**message, "content": texts[0]["text"] if len(texts) == 1 else (texts or "")})
    return out if changed else None


async def complete(model: str, messages: list[dict[str, Any]], *, timeout: float,
                   arguments: dict[str, Any], num_retries: int = 0, gate: ModelGate | None = None) -> Any:
    """One litellm call of a (litellm) model name; a `local/` model is routed to its in-process
    server and waits for one of its slots, a hosted one for its `gate`'s, before the timeout
    starts (and off the job deadline: `admission.queued`)."""
    litellm = _litellm()
    if not local.is_local(model):
        async with gate.slot(model) if gate is not None else contextlib.nullcontext():
            return await litellm.acompletion(model=model, messages=messages, timeout=timeout,
                                             num_retries=num_retries, **arguments)
    name, arguments = await local.route(model, dict(arguments))
    slot = local.slot(model)
    async with queued():
        await slot.acquire()
    try:
        return await litellm.acompletion(model=name, messages=messages, timeout=timeout,
                                         num_retries=num_retries, **arguments)
    finally:
        slot.release()


async def run_job(job: ModelJob, policy: RetryPolicy = RetryPolicy(), *,
                  timeout: float = 600.0, rng: random.Random | None = None,
                  sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                  gate: ModelGate | None = None) -> ModelResult:
    """Call the job's model, then its fallbacks; always returns a result (failed ones carry the
    error of every model tried, and the code and status of the last).  A rate-limited call waits
    at least the provider's `Retry-After` (up to the policy's cap) and narrows the `gate`."""
    litellm = _litellm()
    rng = rng or random.Random()
    started = datetime.now(UTC)
    messages = [m.wire() for m in job.messages]
    failures: list[_Failure] = []
    attempts = 0
    dropped: str | None = None  # why the attachments were left out, once they were
    for model, entry in _candidates(job):
        retries = _retries(job, policy, entry)
        if failures:
            log.warning("model failed; trying a fallback", extra={
                "cycle": job.cycle_id, "failed": failures[-1].model, "fallback": model,
                "fallbackId": entry.id if entry else None})
        missing = _missing_keys(litellm, model)
        if missing:
            failures.append(_Failure(model, (
                f"model {model!r} needs {', '.join(missing)} in the environment of the worker; "
                "set it, or choose another observation.model"), "missing-key", None))
            continue
        arguments = call_arguments(job, model, entry)
        provider = model_provider(model)
        tries = 0
        while True:
            tries += 1
            attempts += 1
            t0 = time.monotonic()
            try:
                response = await complete(model, messages, timeout=timeout, arguments=arguments, gate=gate)
                output = response.choices[0].message.content or ""
            except Exception as exc:  # noqa: BLE001 - every failure is reported, none escapes
                retry = is_transient(exc) and tries <= retries
                code, status = classify_error(exc)
                log.warning("model call failed", extra={
                    "cycle": job.cycle_id, "model": model, "attempt": tries, "retry": retry,
                    "errorCode": code, "errorStatus": status, "error": str(exc)[:500]})
                wait = retry_after(exc) if code == "rate-limited" else None
                if code == "rate-limited" and gate is not None:
                    gate.rate_limited(model, wait)
                if retry:
                    await sleep(max(policy.delay(tries - 1, rng), min(wait or 0.0, policy.cap_ms / 1000)))
                    continue
                plain = without_attachments(messages) if code == "bad-request" and dropped is None else None
                if plain is not None:
                    dropped = f"{type(exc).__name__}: {exc}"[:500]
                    log.warning("model refused the request with its attachments; asking without them",
                                extra={"cycle": job.cycle_id, "model": model, "error": dropped})
                    messages = plain
                    continue
                failures.append(_Failure(model, f"{type(exc).__name__}: {exc}"[:2000], code, status))
                break
            log.debug("model call done in %.3fs", time.monotonic() - t0)
            if gate is not None and not local.is_local(model):
                await gate.answered(model)  # a local model has its slots, no window
            metadata = _provider_metadata(response, provider)
            ours = {"modelId": entry.id if entry else None, "attachmentsDropped": dropped}
            if any(v is not None for v in ours.values()):
                metadata = {**(metadata or {}), "omstream": {k: v for k, v in ours.items() if v is not None}}
            return _result(job, started, ok=True, model=model, attempts=attempts, output=output,
                           usage=_usage(response), metadata=metadata)
    last = failures[-1]
    error = last.error if len(failures) == 1 else "; ".join(
        f"{f.model}: {f.error}" for f in failures)[:4000]
    return _result(job, started, ok=False, model=last.model, attempts=attempts, failure=last,
                   error=error)
