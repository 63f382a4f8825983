"""Running a `ModelJob` through litellm and answering with a `ModelResult`.

This is the only module that imports litellm (3-5 s to import, so lazily).  A call is retried
on transient errors (network, timeouts, HTTP 408/425/429/5xx) with exponential back-off and
jitter; anything else, or a missing API key, becomes a failed result at once, with a message
that says what to fix.  The result is never invented: it is the model's answer or the error.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from schemas.jobs import ModelJob, ModelResult, Usage

__all__ = ["RetryPolicy", "litellm_model_name", "run_job"]

log = logging.getLogger(__name__)

_TRANSIENT_TEXT = (
    "terminated", "fetch failed", "econnreset", "econnrefused", "enotfound", "eai_again",
    "socket hang up", "network error", "request timed out", "request timeout",
    "connection reset", "connection closed", "timed out",
)
# The original's provider/model names that litellm spells differently.
_PROVIDER_PREFIXES = {"google/": "gemini/"}


@dataclass(frozen=True)
class RetryPolicy:
    """Back-off `min(base * 2**k, cap)` ms with ±20 % jitter, for at most `retries` retries."""

    retries: int = 8
    base_ms: float = 1000.0
    cap_ms: float = 120_000.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        raw = min(self.base_ms * 2**attempt, self.cap_ms)
        return raw * rng.uniform(0.8, 1.2) / 1000.0


def _litellm():
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


def is_transient(exc: BaseException) -> bool:
    """The original's retry test: network words, HTTP 408/425/429/5xx, through causes."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = getattr(current, "status_code", None) or getattr(current, "code", None)
        if isinstance(status, int) and (status in (408, 425, 429) or 500 <= status < 600):
            return True
        if getattr(current, "is_retryable", False) or getattr(current, "isRetryable", False):
            return True
        text = str(current).lower()
        if any(word in text for word in _TRANSIENT_TEXT):
            return True
        current = current.__cause__ or getattr(current, "error", None)
        if not isinstance(current, BaseException):
            current = None
    return False


def _missing_keys(litellm, model: str) -> list[str]:
    if model.startswith("scripted/"):
        return []
    try:
        report = litellm.validate_environment(model=model)
    except Exception:  # noqa: BLE001 - an unknown provider is reported by the call itself
        return []
    return list(report.get("missing_keys") or [])


def _result(job: ModelJob, started: datetime, *, ok: bool, model: str, attempts: int,
            output: str | None = None, error: str | None = None, usage: Usage | None = None) -> ModelResult:
    return ModelResult(
        kind=job.kind, cycle_id=job.cycle_id, memory_key=job.memory_key, thread_id=job.thread_id,
        request_hash=job.request_hash, ok=ok, output=output, error=error, model=model,
        attempts=attempts, usage=usage, started_at=started, completed_at=datetime.now(timezone.utc),
    )


async def run_job(job: ModelJob, policy: RetryPolicy = RetryPolicy(), *,
                  timeout: float = 600.0, rng: random.Random | None = None) -> ModelResult:
    """Call the job's model; always returns a result (failed ones carry the error)."""
    litellm = _litellm()
    rng = rng or random.Random()
    started = datetime.now(timezone.utc)
    model = litellm_model_name(job.model)
    missing = _missing_keys(litellm, model)
    if missing:
        return _result(job, started, ok=False, model=model, attempts=0, error=(
            f"model {job.model!r} needs {', '.join(missing)} in the environment of the worker; "
            "set it, or choose another observation.model"
        ))
    messages = [m.wire() for m in job.messages]
    attempt = 0
    while True:
        attempt += 1
        t0 = time.monotonic()
        try:
            response = await litellm.acompletion(
                model=model, messages=messages, timeout=timeout, num_retries=0, **job.settings,
            )
        except Exception as exc:  # noqa: BLE001 - every failure is reported, none escapes
            retry = is_transient(exc) and attempt <= policy.retries
            log.warning("model call failed", extra={"cycle": job.cycle_id, "model": model,
                                                    "attempt": attempt, "retry": retry, "error": str(exc)})
            if not retry:
                return _result(job, started, ok=False, model=model, attempts=attempt,
                               error=f"{type(exc).__name__}: {exc}"[:2000])
            await asyncio.sleep(policy.delay(attempt - 1, rng))
            continue
        log.debug("model call done in %.3fs", time.monotonic() - t0)
        usage = getattr(response, "usage", None)
        return _result(
            job, started, ok=True, model=model, attempts=attempt,
            output=response.choices[0].message.content or "",
            usage=Usage(
                input_tokens=getattr(usage, "prompt_tokens", None),
                output_tokens=getattr(usage, "completion_tokens", None),
                total_tokens=getattr(usage, "total_tokens", None),
            ) if usage else None,
        )
