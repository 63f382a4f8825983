"""Lifecycle hooks (§13): `onObservationStart/End`, `onReflectionStart/End`, once per cycle.

The configuration names them as `"module:function"` references (`HooksConfig`); `Hooks`
imports them once and calls them.  *Which* hook to call with *what* is decided by the fold
(`omstream.engine.step.HookCall`): one start and one end per cycle, whatever the cycle took (a
regeneration, the reflector's compression ladder, a resource memory's parallel batches, the
structured extractors' follow-ups), the end's `usage` summed over every model call of the
cycle, and its `error` set whenever the cycle failed.  Whoever runs the fold calls them once the
fold call's outputs are sent: the fold agent (`omstream.worker.fold_loop`), `om simulate`.

- the start payload is `{threadId, resourceId?, trigger}` (`resourceId` in every scope, when
  the memory has one); the end payload adds `usage {inputTokens, outputTokens, totalTokens}`
  and `providerMetadata` when the models reported them, and `error` (a string) when it failed;
- a hook may be a plain or an `async` function;
- `hookExecution = 'non-blocking'` (the default) runs hooks as tasks nothing waits for;
  `'await'` waits for them.  Async-buffer cycles always run them non-blocking;
- a hook that raises is logged and never fails anything (the product documentation: hook
  errors are caught and logged, they do not fail the cycle).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

__all__ = ["Hooks"]

log = logging.getLogger(__name__)

HookExecution = Literal["non-blocking", "await"]


class Hooks:
    """The configured lifecycle hooks and how to run them.

    `call(name, payload)` calls one; with `background=True` (an async-buffer cycle's) or
    `execution='non-blocking'` it returns at once and the hook runs as a task (`drain()` waits
    for the ones still running).
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

    async def call(self, name: str, payload: dict[str, Any], *, background: bool = False) -> None:
        """Call the hook `name` (if configured) with a copy of `payload`."""
        hook = self.functions.get(name)
        if hook is None:
            return
        if self.execution == "await" and not background:
            await _guarded(name, hook, payload)
            return
        task = asyncio.get_running_loop().create_task(_guarded(name, hook, payload), name=f"om-hook-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for every non-blocking hook still running (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


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
