"""What the worker sends, and how it makes sure the broker has it.

The fold and model agents must not lose an output: a send that fails (a broker restarting) is
retried until it succeeds (`until_done`), and a batch's outputs count as sent only once the
broker has acknowledged every one of them (`ProducerSender.send_all`; the producer waits for
all replicas, `producer_acks=-1`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, Protocol

__all__ = ["Headers", "OutputRecord", "Sender", "until_done"]

# One logger for the whole worker, as before it was a package: log readers filter on it.
log = logging.getLogger("omstream.worker")

#: Record headers as the producer takes them (a model result's signature, a cache entry's).
Headers = list[tuple[str, bytes]]


class OutputRecord(NamedTuple):
    """A record to send: an event, a job, a dead letter, a model result or a cache entry."""

    topic: str
    key: bytes
    value: bytes


class Sender(Protocol):
    """Sends records and returns once the broker has every one of them."""

    async def send_all(self, records: Sequence[OutputRecord], headers: Headers | None = None) -> None: ...


async def until_done(what: str, attempt: Callable[[], Awaitable[None]], *, first_delay: float = 0.1,
                     max_delay: float = 5.0) -> None:
    """Run `attempt` until it succeeds (sends to a broker that is restarting fail for a while);
    each failure is logged.  Cancellation still stops it."""
    delay = first_delay
    while True:
        try:
            await attempt()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried, and said so
            log.error("could not %s; retrying in %.1f s", what, delay,
                      extra={"error": f"{type(exc).__name__}: {exc}"[:300]})
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)
