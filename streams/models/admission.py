"""How many calls each model gets at once, and a job deadline that does not count the queue.

A hosted provider answers a burst beyond its rate limit with 429, often naming a `Retry-After`;
retrying each call on its own only sends the next burst into the same wall.  `ModelGate` keeps a
window per model instead, the way TCP keeps its congestion window: at most `limit` calls at once
(`model_limits`, else `model_concurrency`); a rate-limited answer halves the window and holds
every new call to that model until the provider's `Retry-After` has passed; each window's worth
of answers widens it by one again, up to the limit.  A local model is not gated here: its
server's slots (`omstream.models.local`) are its limit.

A job's deadline (`job_deadline_ms`) bounds how long a cycle waits for its model, not how long
the job queued behind other jobs for a slot: with one local slot and calls of a minute, the
fifth job in line would otherwise fail before its call began.  `job_deadline` starts the clock;
`queued` stops it while a call waits for its slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ModelGate", "causes", "job_deadline", "parse_model_limits", "queued", "retry_after"]

log = logging.getLogger("omstream.models")

_deadline: ContextVar[asyncio.Timeout | None] = ContextVar("omstream_job_deadline", default=None)


@contextlib.asynccontextmanager
async def job_deadline(seconds: float) -> AsyncIterator[None]:
    """`asyncio.timeout(seconds)` whose clock `queued` can stop; raises TimeoutError past it."""
    async with asyncio.timeout(seconds) as timeout:
        token = _deadline.set(timeout)
        try:
            yield
        finally:
            _deadline.reset(token)


@contextlib.asynccontextmanager
async def queued() -> AsyncIterator[None]:
    """Around waiting for a slot: the time spent inside does not count against the job deadline."""
    timeout = _deadline.get()
    when = timeout.when() if timeout is not None and not timeout.expired() else None
    if timeout is None or when is None:
        yield
        return
    loop = asyncio.get_running_loop()
    left = when - loop.time()
    timeout.reschedule(None)
    try:
        yield
    finally:
        timeout.reschedule(loop.time() + max(left, 0.0))


def parse_model_limits(text: str) -> dict[str, int]:
    """`"openai/gpt-4o=8, anthropic/claude-3-5-haiku-latest=4"` → {model: calls at once};
    ValueError naming the entry that is not `model=N` with N ≥ 1."""
    limits: dict[str, int] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        model, sep, number = entry.rpartition("=")
        if not sep or not model.strip() or not number.strip().isdigit() or int(number) < 1:
            raise ValueError(f"expected model=N entries (N at least 1) separated by commas, got {entry!r}")
        limits[model.strip()] = int(number)
    return limits


def causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and its causes (`__cause__`, litellm's `.error`), each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        nxt = current.__cause__ or getattr(current, "error", None)
        current = nxt if isinstance(nxt, BaseException) else None


def _headers(exc: BaseException) -> Iterator[Mapping[str, Any]]:
    """The headers an error carries: litellm's (`headers`, `litellm_response_headers`) and its
    HTTP response's (httpx's `Headers` is a Mapping)."""
    response = getattr(exc, "response", None)
    for value in (getattr(exc, "headers", None), getattr(exc, "litellm_response_headers", None),
                  getattr(response, "headers", None)):
        if isinstance(value, Mapping):
            yield value


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    value = headers.get(name)
    if value is None:  # a plain dict keeps the provider's case
        value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    return None if value is None else str(value)


def retry_after(exc: BaseException, now: float | None = None) -> float | None:
    """Seconds the provider asked us to wait (`retry-after-ms`, or `retry-after` in seconds or as
    an HTTP date), searched through the error's causes; None when it named none."""
    for current in causes(exc):
        for headers in _headers(current):
            millis = _header(headers, "retry-after-ms")
            with contextlib.suppress(ValueError):
                if millis is not None:
                    return max(float(millis) / 1000.0, 0.0)
            seconds = _header(headers, "retry-after")
            if seconds is not None:
                with contextlib.suppress(ValueError):
                    return max(float(seconds), 0.0)
                with contextlib.suppress(TypeError, ValueError):
                    at = email.utils.parsedate_to_datetime(seconds).timestamp()
                    return max(at - (time.time() if now is None else now), 0.0)
    return None


@dataclass
class _Window:
    limit: int
    allowed: int
    in_flight: int = 0
    answered: int = 0  # answers since the window last changed
    paused_until: float = 0.0
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)


class ModelGate:
    """Calls at once per model, adaptive on rate limits (module docstring)."""

    def __init__(self, default_limit: int, limits: Mapping[str, int] | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.default_limit, self.limits, self._clock = default_limit, dict(limits or {}), clock
        self._windows: dict[str, _Window] = {}

    def _window(self, model: str) -> _Window:
        if model not in self._windows:
            limit = self.limits.get(model, self.default_limit)
            self._windows[model] = _Window(limit=limit, allowed=limit)
        return self._windows[model]

    def allowed(self, model: str) -> int:
        """The model's window now: calls it may have in flight at once."""
        return self._window(model).allowed

    @contextlib.asynccontextmanager
    async def slot(self, model: str) -> AsyncIterator[None]:
        """Hold one of the model's calls while inside; waits (off the job deadline) for a free
        one and for the end of a rate-limit pause."""
        window = self._window(model)
        async with queued(), window.changed:
            while True:
                pause = window.paused_until - self._clock()
                if pause > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(window.changed.wait(), pause)
                    continue
                if window.in_flight < window.allowed:
                    break
                await window.changed.wait()
            window.in_flight += 1
        try:
            yield
        finally:
            window.in_flight -= 1
            async with window.changed:
                window.changed.notify_all()

    def rate_limited(self, model: str, wait_s: float | None) -> None:
        """A 429 from `model`: halve its window, and hold its new calls for `wait_s`."""
        window = self._window(model)
        window.allowed, window.answered = max(1, window.allowed // 2), 0
        if wait_s:
            window.paused_until = max(window.paused_until, self._clock() + wait_s)
        log.warning("model rate-limited; fewer calls at once", extra={
            "model": model, "callsAtOnce": window.allowed, "retryAfterS": wait_s})

    async def answered(self, model: str) -> None:
        """An answer from `model`: a window's worth of them widens the window by one."""
        window = self._window(model)
        window.answered += 1
        if window.answered >= window.allowed and window.allowed < window.limit:
            window.allowed, window.answered = window.allowed + 1, 0
            async with window.changed:
                window.changed.notify_all()
