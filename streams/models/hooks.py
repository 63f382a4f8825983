"""Lifecycle hooks (§13): `onObservationStart/End`, `onReflectionStart/End` around model jobs.

The configuration names them as `"module:function"` references (`HooksConfig`); `Hooks`
imports them once and calls them around each model job:

- observation jobs (`observe`, `buffer`) call `onObservationStart` / `onObservationEnd`,
  reflection jobs (`reflect`, `buffer-reflection`) `onReflectionStart` / `onReflectionEnd`;
  other jobs (`extract`) call none;
- the start payload is `{threadId, resourceId?, trigger}`; the end payload adds
  `usage {inputTokens, outputTokens, totalTokens}` and `providerMetadata` when the model
  reported them, and `error` (a string) when the job failed;
- a hook may be a plain or an `async` function;
- `hookExecution = 'non-blocking'` (the default) runs hooks as tasks the job never waits for;
  `'await'` waits for them.  Async-buffer jobs always run them non-blocking;
- a hook that raises is logged and never fails the job (the product documentation: hook errors
  are caught and logged, they do not fail the cycle).

One job is one call of a hook pair: a cycle the fold runs as several jobs (a regeneration after
a degenerate answer, the reflector's compression ladder) reports each job on its own.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

from omstream.schemas.jobs import ModelJob, ModelResult

from .calls import RetryPolicy, run_job

__all__ = ["HOOK_NAMES", "Hooks", "end_payload", "run_job_with_hooks", "start_payload"]

log = logging.getLogger(__name__)

HookExecution = Literal["non-blocking", "await"]
#: Hook names (camelCase, as configured) by job kind: (start, end).
HOOK_NAMES: dict[str, tuple[str, str]] = {
    "observe": ("onObservationStart", "onObservationEnd"),
    "buffer": ("onObservationStart", "onObservationEnd"),
    "reflect": ("onReflectionStart", "onReflectionEnd"),
    "buffer-reflection": ("onReflectionStart", "onReflectionEnd"),
}
_ASYNC_KINDS = ("buffer", "buffer-reflection")


class Hooks:
    """The configured lifecycle hooks and how to run them.

    `start(kind, payload)` / `end(kind, payload)` call the hook of the job kind; with
    `blocking=False` (or `execution='non-blocking'`) they return at once and the hook runs as a
    task (`drain()` waits for the ones still running).
    """

    def __init__(self, functions: Mapping[str, Callable[..., Any]] | None = None,
                 execution: HookExecution = "non-blocking") -> None:
        if execution not in ("non-blocking", "await"):
            raise ValueError(f"hook execution {execution!r} is unknown; use 'non-blocking' or 'await'")
        self.functions = dict(functions or {})
        self.execution: HookExecution = execution
        self._tasks: set[asyncio.Task[Any]] = set()

    @classmethod
    def from_config(cls, om: Any) -> Hooks:
        """From an `OmConfig` (its `hooks` and `hook_execution`); imports every hook now, so a
        reference that cannot be imported fails at start-up with the reason."""
        return cls(om.hooks.load(), om.hook_execution)

    def __bool__(self) -> bool:
        return bool(self.functions)

    async def start(self, kind: str, payload: dict[str, Any], *, blocking: bool | None = None) -> None:
        names = HOOK_NAMES.get(kind)
        if names:
            await self._call(names[0], payload, blocking)

    async def end(self, kind: str, payload: dict[str, Any], *, blocking: bool | None = None) -> None:
        names = HOOK_NAMES.get(kind)
        if names:
            await self._call(names[1], payload, blocking)

    async def drain(self) -> None:
        """Wait for every non-blocking hook still running (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _call(self, name: str, payload: dict[str, Any], blocking: bool | None) -> None:
        hook = self.functions.get(name)
        if hook is None:
            return
        if blocking is None:
            blocking = self.execution == "await"
        if blocking:
            await _guarded(name, hook, payload)
            return
        task = asyncio.get_running_loop().create_task(_guarded(name, hook, payload),
                                                      name=f"om-hook-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _guarded(name: str, hook: Callable[..., Any], payload: dict[str, Any]) -> None:
    """Run one hook; whatever it raises is logged, never propagated."""
    try:
        outcome = hook(dict(payload))
        if inspect.isawaitable(outcome):
            await outcome
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a hook never fails the cycle
        log.warning("hook %s raised %s: %s", name, type(exc).__name__, exc, exc_info=True,
                    extra={"hook": name, "threadId": payload.get("threadId")})


def _trigger(job: ModelJob) -> str:
    if job.trigger:
        return job.trigger
    return "async-buffer" if job.kind in _ASYNC_KINDS else "turn-sync"


def start_payload(job: ModelJob) -> dict[str, Any]:
    """`{threadId, resourceId?, trigger}` of a job (the resource from a `resource:` memory key)."""
    payload: dict[str, Any] = {"threadId": job.thread_id}
    if job.memory_key.startswith("resource:"):
        payload["resourceId"] = job.memory_key.removeprefix("resource:")
    payload["trigger"] = _trigger(job)
    return payload


def end_payload(job: ModelJob, result: ModelResult) -> dict[str, Any]:
    """The start payload plus `usage`, `providerMetadata` and, for a failed job, `error`."""
    payload = start_payload(job)
    if result.usage is not None:
        payload["usage"] = {"inputTokens": result.usage.input_tokens,
                            "outputTokens": result.usage.output_tokens,
                            "totalTokens": result.usage.total_tokens}
    if result.provider_metadata:
        payload["providerMetadata"] = result.provider_metadata
    if not result.ok:
        payload["error"] = result.error or result.error_code or "model call failed"
    return payload


async def run_job_with_hooks(job: ModelJob, policy: RetryPolicy = RetryPolicy(),
                             hooks: Hooks | None = None, **run_options: Any) -> ModelResult:
    """`run_job` between the job's start and end hooks (`run_options` go to `run_job`:
    `timeout`, `rng`, `sleep`).  Async-buffer jobs never wait for their hooks."""
    if not hooks:
        return await run_job(job, policy, **run_options)
    blocking = False if _trigger(job) == "async-buffer" or job.kind in _ASYNC_KINDS else None
    await hooks.start(job.kind, start_payload(job), blocking=blocking)
    result = await run_job(job, policy, **run_options)
    await hooks.end(job.kind, end_payload(job, result), blocking=blocking)
    return result
