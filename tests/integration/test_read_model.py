"""The persistent read model on the real broker (issue 27, acceptance 3): `om serve` killed and
started again on the same data directory loads its store and reads on from its offsets.

Messages flow through the worker (async buffering, so buffered chunks activate).  The server is
SIGKILLed once idle and once while new turns flow; each restart is healthy from its store (its
log says how many views it loaded), serves every thread's window as it was before, and its
feed holds every event of the topic once, seqs dense.  A second server on the same data
directory at the same time gets its own slot, builds its store from the topic, and serves the
same windows: the resumed projection equals one built from nothing.
"""

import asyncio
import time
from collections import defaultdict

import aiohttp
import orjson
import pytest

from omstream.client import OmClient
from omstream.client.feed_reader import sse_frames
from omstream.processes import stop_child
from omstream.topics import Topics
from tests.helpers import message
from tests.integration.options import om_options
from tests.integration.support import Server, read_all

pytestmark = pytest.mark.integration

THREADS = [f"rm{i}" for i in range(5)]


async def turns(client: OmClient, first: int, count: int, pause: float = 0.0) -> None:
    """`count` agent-loop turns on every thread: message, step, reply, turn end."""
    for i in range(first, first + count):
        await asyncio.sleep(pause)
        for thread in THREADS:
            user, reply = message(2 * i, thread=thread, words=70), message(2 * i + 1, thread=thread, words=70)
            await client.send_message(user)
            await client.step_started(thread, step_number=0, at=user.created_at, after_message_id=user.id)
            await client.send_message(reply)
            await client.turn_ended(thread, at=reply.created_at, after_message_id=reply.id)


async def topic_log(settings) -> dict[str, dict[int, dict]]:
    """memory key -> seq -> the event as written (once each)."""
    out: dict[str, dict[int, dict]] = defaultdict(dict)
    for r in await read_all(settings, Topics(settings.namespace).events, idle=0.3):
        event = orjson.loads(r.value)
        out[event["memoryKey"]].setdefault(event["seq"], event)
    return out


async def feed_of(server: Server, thread: str) -> list[tuple[int, dict]]:
    """The thread's whole feed as the server keeps it: (SSE id, part), in order."""
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/threads/{thread}/events",
                                                         params={"follow": "false"}) as response:
        assert response.status == 200
        return [(int(i), orjson.loads(data)) async for i, data in sse_frames(response.content)
                if data != "[DONE]"]


async def settled(settings, servers: list[Server], messages: int) -> dict[str, dict[int, dict]]:
    """The topic once every message was accepted, it stopped growing, and every server's feed
    of every thread reached its last event."""
    previous, deadline = None, time.monotonic() + 180
    while time.monotonic() < deadline:
        log = await topic_log(settings)
        tops = {key: max(seqs) for key, seqs in log.items()}
        accepted = sum(e["type"] == "om-message-accepted" for seqs in log.values() for e in seqs.values())
        if accepted == messages and tops == previous:
            feeds = [await feed_of(s, t) for s in servers for t in THREADS]
            if all(f and f[-1][0] == tops[f"thread:{t}"] for f, t in zip(feeds, THREADS * len(servers))):
                return log
        previous = tops
        await asyncio.sleep(1.0)
    raise TimeoutError("the servers never reached the topic's last events")


async def windows(server: Server) -> dict[str, dict]:
    return {t: (await server.get(f"/threads/{t}/context", wait=0))[1] for t in THREADS}


def seen(windows: dict[str, dict]) -> int:
    """Messages the windows know of: unobserved or covered by observations."""
    return sum(len(w["messages"]) + len(w["observedMessageIds"]) for w in windows.values())


async def started(server: Server) -> float:
    """Seconds from now until the server is healthy."""
    t0 = time.monotonic()
    await server.ready()
    return time.monotonic() - t0


def loaded(server: Server) -> list[dict]:
    """The server log's "read model loaded" records (views read back from the store)."""
    lines = [orjson.loads(line) for line in server.log.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("msg") == "read model loaded"]


def test_om_serve_killed_and_restarted_resumes_from_its_store(new_env, tmp_path):
    env = new_env(options=om_options(observation={"messageTokens": 600}))  # async buffering
    env.start_worker()

    async def scenario():
        servers: list[Server] = []

        def serve(name: str) -> Server:
            servers.append(Server(env.settings, tmp_path / f"{name}.log"))
            return servers[-1]

        try:
            async with OmClient(env.settings) as client:
                await turns(client, 0, 8)
                first = serve("first")
                cold = await started(first)
                await settled(env.settings, [first], 16 * len(THREADS))
                before = await windows(first)
                stop_child(first.proc, kill=True)

                warm = serve("warm")
                # Its old slot again: the killed process's lock went with it.
                warm_s = await started(warm)
                after = await windows(warm)
                # A second server on the same data directory at the same time: its own slot.
                other = serve("other")
                other_s = await started(other)

                # New turns while the warm server follows them; killed half way and restarted.
                more = asyncio.create_task(turns(client, 8, 4, pause=1.0))
                while seen(await windows(warm)) <= seen(before):
                    assert not more.done(), "the warm server did not follow the new turns"
                    await asyncio.sleep(0.05)
                stop_child(warm.proc, kill=True)  # it has applied some of the new events, not all
                again = serve("again")
                again_s = await started(again)
                await more
                log = await settled(env.settings, [again, other], 24 * len(THREADS))
                feeds = {t: await feed_of(again, t) for t in THREADS}
                resumed, rebuilt = await windows(again), await windows(other)
                records = await read_all(env.settings, Topics(env.settings.namespace).events, idle=0.3)
                ends = {r.partition: r.offset + 1 for r in records}
                return (cold, warm_s, other_s, again_s, before, after, log, feeds, resumed, rebuilt,
                        loaded(warm), loaded(other), loaded(again), ends)
        finally:
            for server in servers:
                server.stop()

    (cold, warm_s, other_s, again_s, before, after, log, feeds, resumed, rebuilt,
     warm_load, other_load, again_load, ends) = asyncio.run(scenario())
    # The restarts read their views back from the store, the second server built its own.
    assert [(r["path"][-13:], r["threads"]) for r in warm_load + again_load + other_load] == [
        ("slot-0.sqlite", len(THREADS)), ("slot-0.sqlite", len(THREADS)), ("slot-1.sqlite", 0)]
    # The second kill came while the new turns flowed: the restart had events left to read.
    stored_at = {int(p): o for p, o in again_load[0]["positions"].items()}
    assert sum(stored_at.values()) < sum(ends.values()), (stored_at, ends)
    assert before == after, "the restarted server serves other windows"
    assert all(w["observations"] and w["messages"] for w in after.values()), after
    for thread, feed in feeds.items():
        events = log[f"thread:{thread}"]
        assert [seq for seq, _ in feed] == list(range(1, len(events) + 1)), f"{thread}: duplicate or gap"
        for seq, part in feed:
            assert part["data"] == events[seq]["data"], (thread, seq)
    assert resumed == rebuilt, "the resumed projection differs from one built from the topic"
    assert sum(w["cycles"] for w in resumed.values()) > sum(w["cycles"] for w in before.values())
    print(f"\nread model: {sum(len(e) for e in log.values())} events on {len(THREADS)} threads; healthy after "
          f"cold {cold:.2f} s, SIGKILL + warm restart {warm_s:.2f} s, second server (own slot) {other_s:.2f} s, "
          f"restart after a SIGKILL mid-stream {again_s:.2f} s; windows equal before/after, feeds dense")
