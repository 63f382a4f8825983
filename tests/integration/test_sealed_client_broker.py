"""`OmClient` with a namespace key, on the broker: what it sends is sealed in `<ns>.log`, its key
ring reads `<ns>.keys`, `known_thread` opens the log, and a shredded thread's messages are passed
over.  (The fold is not wired to open them yet: no worker here.)"""

import asyncio
import time
from dataclasses import replace

import pytest

from omstream.client import OmClient
from omstream.client.om_client import known_thread
from omstream.crypto import sealer_of
from omstream.schemas.messages import Message
from tests.helpers import T0
from tests.integration.support import read_all

pytestmark = pytest.mark.integration

KEY = "an-integration-test-namespace-key-" + "x" * 32
SECRET = "the locker code is 4711"


def test_a_sealed_client_on_the_broker(new_env):
    env = new_env()
    settings = replace(env.settings, namespace_key=KEY)

    async def scenario() -> None:
        started = time.monotonic()
        async with OmClient(settings) as client:
            opened = time.monotonic() - started
            await client.send_message(Message(id="m1", thread_id="alpha", role="user", content=SECRET,
                                              created_at=T0))
            await client.reflect("alpha", prompt="about the locker")
            sent = time.monotonic() - started - opened
        print(f"sealed client: open {opened:.2f} s (key ring read), first message + reflect {sent:.2f} s "
              "(a new memory's key created)")
        log = await read_all(settings, settings.namespace + ".log", idle=0.5)
        assert len(log) == 2 and all(b"locker" not in r.value and b"locker" not in r.value for r in log)
        assert all(b'"omSealed":1' in r.value for r in log)
        assert await known_thread(settings, "alpha")
        assert not await known_thread(settings, "beta")
        sealer = sealer_of(settings)
        await sealer.start()
        try:
            await sealer.shred("thread:alpha")
        finally:
            await sealer.stop()
        # Its only message no longer opens: passed over, the thread is unknown.
        assert not await known_thread(settings, "alpha")

    asyncio.run(scenario())
