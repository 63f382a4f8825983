"""`omstream.pipeline.sending.until_done`: what the fold and model agents must not lose is retried until sent."""

import asyncio

import pytest

from omstream.pipeline.sending import until_done


def test_a_failing_send_is_retried_until_it_succeeds(caplog):
    calls = []

    async def attempt():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("broker restarting")

    asyncio.run(until_done("send", attempt, first_delay=0.001))
    assert len(calls) == 3
    assert sum("could not send" in r.getMessage() for r in caplog.records) == 2


def test_cancellation_is_not_swallowed():
    async def main():
        async def never():
            raise ConnectionError("down")

        task = asyncio.create_task(until_done("send", never, first_delay=0.01))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
