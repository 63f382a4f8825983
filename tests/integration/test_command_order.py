"""A command sent right after a message is applied after it, on the real broker (§9).

The first design lost this race in 6-10 of 20 runs: a command overtook the acknowledged message
before it.  Here 100 fresh threads each get message -> observe, 100 message -> delete and 100
message -> override, sent with no pause (the command goes out the moment the broker has the
message), and `<ns>.events` must show, for every thread, the command applied to a memory that
already held the message.
"""

import asyncio
import time
from collections import Counter, defaultdict

import pytest

from omstream.client import OmClient
from omstream.engine.rules.tokens import count_message, get_counter
from omstream.schemas.control import ConfigOverridden, ConfigOverrides, ObservationOverrides, ThreadDeleted
from tests.helpers import T0, message
from tests.integration.support import EventWatcher, final_states

pytestmark = pytest.mark.integration

N = 100
THRESHOLD = 100_000  # no message reaches it: only the observe command starts a cycle
OVERRIDE = 77_777


def threads(kind: str) -> list[str]:
    return [f"{kind}-{i}" for i in range(N)]


def accepted_first(thread: str, evs: list) -> list:
    """The thread's events after the first: `om-message-accepted` of its one message."""
    assert evs and evs[0].type == "om-message-accepted", (thread, [e.type for e in evs])
    assert evs[0].data.message.id == f"{thread}-m0"
    return evs[1:]


def test_each_command_applies_after_the_message_sent_before_it(new_env):
    env = new_env(message_tokens=THRESHOLD)
    env.start_worker()
    kinds = ("observe", "delete", "override")

    async def one(client: OmClient, kind: str, thread: str) -> int:
        m = message(0, thread=thread, words=40)
        await client.send_message(m)
        if kind == "observe":
            await client.observe(thread)
        elif kind == "delete":
            await client.send_control(ThreadDeleted(thread_id=thread, resource_id="u1", at=T0))
        else:
            await client.send_control(ConfigOverridden(
                thread_id=thread, resource_id="u1", at=T0,
                overrides=ConfigOverrides(observation=ObservationOverrides(message_tokens=OVERRIDE))))
        return count_message(m, get_counter(env.settings.om.token_counter), env.settings.om.observer_model)

    def done(by_thread) -> bool:
        for t in threads("observe"):
            if not any(e.type == "data-om-observation-end" for e in by_thread.get(t, ())):
                return False
        for t in threads("delete"):
            if not any(e.type == "om-memory-deleted" for e in by_thread.get(t, ())):
                return False
        return all(sum(e.type == "data-om-status" for e in by_thread.get(t, ())) >= 2
                   for t in threads("override"))

    async def scenario():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watch:
            # All 300 threads at once, each sending its message and then its command.
            tokens = await asyncio.gather(*(one(client, k, t) for k in kinds for t in threads(k)))

            def grouped(evs):
                out = defaultdict(list)
                for e in evs:
                    out[e.thread_id].append(e)
                return out

            evs = await watch.wait_for(lambda evs: done(grouped(evs)), timeout=120)
            until = time.monotonic() + 1.5  # read on: anything late would be a wrong extra event
            evs = await watch.wait_for(lambda _: time.monotonic() > until)
        states = await final_states(env.settings)
        names = [t for k in kinds for t in threads(k)]
        return dict(zip(names, tokens)), grouped(evs), states

    tokens, by_thread, states = asyncio.run(scenario())
    ok = Counter()
    for thread in threads("observe"):
        evs = sorted({e.event_id: e for e in by_thread[thread]}.values(), key=lambda e: e.seq)
        evs = accepted_first(thread, evs)
        types = [e.type for e in evs]
        assert types == ["data-om-status", "data-om-observation-start", "data-om-observation-end",
                         "data-om-status"], (thread, types, env.logs())
        # The message was folded first (its status counts it), then the observe covered it.
        counted = evs[0].data.windows.active.messages.tokens  # the message's tokens, as folded
        assert counted >= tokens[thread] > 0
        assert evs[1].data.tokens_to_observe == counted
        assert evs[2].data.observed_message_ids == (f"{thread}-m0",)
        assert evs[3].data.windows.active.messages.tokens == 0
        ok["observe"] += 1
    for thread in threads("delete"):
        evs = sorted({e.event_id: e for e in by_thread[thread]}.values(), key=lambda e: e.seq)
        evs = accepted_first(thread, evs)
        assert [e.type for e in evs] == ["data-om-status", "om-memory-deleted"], (thread, evs)
        assert evs[0].data.windows.active.messages.tokens >= tokens[thread] > 0
        # The deletion came after the message, so the memory it left holds nothing of it.
        state = states[f"thread:{thread}"]
        assert state["pending"] == [] and state["seen"] == {}, state
        ok["delete"] += 1
    for thread in threads("override"):
        evs = sorted({e.event_id: e for e in by_thread[thread]}.values(), key=lambda e: e.seq)
        evs = accepted_first(thread, evs)
        assert [e.type for e in evs] == ["data-om-status", "data-om-status"], (thread, evs)
        first, second = (e.data.windows.active.messages for e in evs)
        assert first.tokens >= tokens[thread] > 0 and first.threshold == THRESHOLD
        # The override's status already counts the message: it was applied after it.
        assert (second.tokens, second.threshold) == (first.tokens, OVERRIDE)
        assert states[f"thread:{thread}"]["message_tokens_override"] == OVERRIDE
        ok["override"] += 1
    print(f"\ncommand applied after its message: {dict(ok)} of {N} threads each")
    assert ok == {"observe": N, "delete": N, "override": N}
