"""The whole path on the real broker: client -> fold -> model agent -> events -> context."""

import asyncio

import pytest

from omstream.client import OmClient
from omstream.engine.rules.tokens import get_counter
from tests.helpers import message
from tests.integration.support import events, expected_cycles, settled_feed

pytestmark = pytest.mark.integration


def test_two_threads_of_100_messages(new_env):
    env = new_env(message_tokens=1000)
    env.start_worker()
    threads = {t: [message(i, thread=t, words=40 + (i * 13) % 70) for i in range(100)] for t in ("alpha", "beta")}
    counter = get_counter("tokenx")
    expected = {t: expected_cycles(ms, counter, 1000) for t, ms in threads.items()}
    assert all(n >= 5 for n in expected.values())

    async def scenario():
        async with OmClient(env.settings) as client:
            # interleave the threads, as two conversations would
            for i in range(100):
                await client.send_messages([threads["alpha"][i], threads["beta"][i]])
        feed = await settled_feed(env.settings, {t: (100, expected[t]) for t in threads}, timeout=180)
        return feed, await events(env.settings)

    feed, log = asyncio.run(scenario())
    for thread, msgs in threads.items():
        view = feed.projection.threads[thread]
        assert view.cycles == expected[thread], env.logs()
        raw = [m.id for m in view.unobserved()]
        assert not set(raw) & view.observed
        assert sorted(raw + sorted(view.observed)) == sorted(m.id for m in msgs)
        per_thread = [e for e in log if e.thread_id == thread]
        assert [e.seq for e in per_thread] == list(range(1, len(per_thread) + 1))
        kinds = [e.type for e in per_thread
                 if e.type not in ("data-om-status", "om-message-accepted", "om-input-held", "om-input-released")]
        accepted = [e.data.message.id for e in per_thread if e.type == "om-message-accepted"]
        assert accepted == [m.id for m in msgs]  # each message once, in the thread's order
        assert kinds == ["data-om-observation-start", "data-om-observation-end"] * expected[thread]
        snapshot = view.snapshot()
        assert snapshot["observations"].count("User said:") + snapshot["observations"].count("Assistant replied:") == len(view.observed)
