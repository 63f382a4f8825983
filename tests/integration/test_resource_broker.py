"""Resource scope on the real broker (issue 28): one memory per user across their threads.

- Isolation (acceptance 2): three users, two threads each, produced interleaved; no event of
  one user's memory, and no context answer or feed frame `om serve` gives for one user's
  thread, holds another user's message text, thread id (plain or hashed) or observation.
- Two producers (acceptance 5): two threads of one user written at once by two clients give
  the memory `om simulate` makes of the log's order.
- Batching (acceptance 3): with a small `maxTokensPerBatch` and an Observer that takes a fixed
  time per call, one cycle's batch calls run side by side in the model agent (their start and
  end times, as the model agent recorded them on the log, overlap) and their thread sets follow
  the rule (largest threads first up to the threshold, by oldest message, batched greedily).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from datetime import timedelta

import aiohttp
import orjson
import pytest

from omstream.client import OmClient
from omstream.conversations.simulation import simulate
from omstream.engine.prompting.sections import section_bodies, shown_thread_id
from omstream.engine.rules.tokens import count_messages
from omstream.projections.views.context import ContextProjection
from omstream.projections.views.resource_views import ResourceRendering
from omstream.schemas.codec import decode_input, encode
from omstream.schemas.control import StepStarted
from omstream.schemas.jobs import ModelJob, ModelResult
from omstream.schemas.keys import UnroutedRecord
from omstream.schemas.messages import Message
from omstream.topics import Topics
from tests.helpers import T0, text_of
from tests.integration.options import om_options
from tests.integration.support import EventWatcher, Server, read_all
from tests.integration.test_export import without_holds

pytestmark = pytest.mark.integration

RESOURCES = ("alpha", "beta", "gamma")
ALPHA_TOKEN, ADMIN_TOKEN = "alpha-token-0123456789", "admin-token-0123456789"


def say(resource: str, thread: str, n: int, words: int = 40) -> Message:
    """The n-th message of a run; its text carries its user's mark (`ALPHA-SECRET-…`)."""
    return Message(id=f"{thread}-m{n}", thread_id=thread, resource_id=resource,
                   role="user" if n % 2 == 0 else "assistant",
                   content=f"{resource.upper()}-SECRET-{n} " + text_of(words, n),
                   created_at=T0 + timedelta(seconds=20 * n))


def settled(key: str, last_offset: int, messages: int):
    """The memory has accepted its `messages`, folded the record at `last_offset` (an event
    caused by it or by a later input: a held input is folded after the result that releases
    it), and every thread's cycle that started has ended or failed."""
    def check(events) -> bool:
        mine = [e for e in events if e.memory_key == key]
        if sum(e.type == "om-message-accepted" for e in mine) < messages:
            return False
        if not any(e.input_offset is not None and e.input_offset >= last_offset for e in mine):
            return False
        starts = Counter((e.data.cycle_id, e.thread_id) for e in mine if e.type == "data-om-observation-start")
        ends = Counter((e.data.cycle_id, e.thread_id) for e in mine
                       if e.type in ("data-om-observation-end", "data-om-observation-failed"))
        return starts == ends
    return check


async def _get(url: str, token: str, **params: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        async with http.get(url, params=params, headers={"Authorization": f"Bearer {token}"}) as r:
            return r.status, await r.text()


def _frames(body: str) -> list[str]:
    return [line[len("data: "):] for line in body.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


def _foreign(resource: str, threads: dict[str, list[str]], observations: dict[str, str]) -> list[str]:
    """What no output of `resource`'s memory may hold: the other users' marks, thread ids
    (plain and as shown to models) and observation lines."""
    out = []
    for other, their_threads in threads.items():
        if other == resource:
            continue
        out.append(f"{other.upper()}-SECRET")
        out += [t for thread in their_threads for t in (thread, shown_thread_id(thread, True))]
        out += [line.strip() for line in observations.get(other, "").splitlines()
                if len(line.strip()) > 24 and not line.startswith(("<thread", "</thread", "Date:", "---"))]
    return out


def test_resources_never_see_each_other_through_events_contexts_or_feeds(new_env, tmp_path, monkeypatch):
    env = new_env(options=om_options(scope="resource", observation={"messageTokens": 500, "bufferTokens": False}))
    env.start_worker()
    monkeypatch.setenv("OM_API_TOKENS", f"{ALPHA_TOKEN} = alpha; {ADMIN_TOKEN} = *")
    threads = {r: [f"{r}-t1", f"{r}-t2"] for r in RESOURCES}
    topics = Topics(env.settings.namespace)
    turns = 8

    async def scenario():
        last: dict[str, int] = {}
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            # A step that names no resource cannot be routed in resource scope: refused before
            # it is sent, and dead-lettered when a producer writes it anyway.
            with pytest.raises(UnroutedRecord, match="names no resourceId"):
                await client.step_started("alpha-t1", step_number=0)
            await client.send_raw(topics.log, b"resource:alpha-t1",
                                  encode(StepStarted(thread_id="alpha-t1", step_number=0, at=T0)))
            for n in range(turns):  # every thread of every user takes its turn, interleaved
                for resource in RESOURCES:
                    for thread in threads[resource]:
                        sent = say(resource, thread, n)
                        await client.send_message(sent)
                        if sent.role == "user":
                            await client.step_started(thread, step_number=0, resource_id=resource,
                                                      at=sent.created_at, after_message_id=sent.id)
            for resource in RESOURCES:
                step = await client.step_started(threads[resource][0], step_number=1, resource_id=resource,
                                                 at=T0 + timedelta(hours=1))
                last[resource] = step.offset
            for resource in RESOURCES:
                await watcher.wait_for(settled(f"resource:{resource}", last[resource], 2 * turns), timeout=90)
            server = Server(env.settings, tmp_path / "serve.log")
            try:
                await server.ready()
                contexts, feeds = {}, {}
                for resource in RESOURCES:
                    for thread in threads[resource]:
                        status, body = await _get(f"{server.url}/threads/{thread}/context", ADMIN_TOKEN, wait="0")
                        assert status == 200, body
                        contexts[thread] = orjson.loads(body)
                        status, body = await _get(f"{server.url}/threads/{thread}/events", ADMIN_TOKEN,
                                                  follow="false")
                        assert status == 200, body
                        feeds[thread] = _frames(body)
                # A token bound to alpha reads alpha's threads, and nothing of beta's.
                access = {thread: (await _get(f"{server.url}/threads/{thread}/context", ALPHA_TOKEN, wait="0"))[0]
                          for thread in ("alpha-t1", "alpha-t2", "beta-t1", "gamma-t2")}
                access["feed alpha-t2"] = (await _get(f"{server.url}/threads/alpha-t2/events", ALPHA_TOKEN,
                                                      follow="false"))[0]
                access["feed beta-t1"] = (await _get(f"{server.url}/threads/beta-t1/events", ALPHA_TOKEN,
                                                     follow="false"))[0]
                listed = orjson.loads((await _get(f"{server.url}/threads", ALPHA_TOKEN))[1])
            finally:
                server.stop()
            dead = [orjson.loads(r.value) for r in await read_all(env.settings, topics.dlq, idle=0.3)]
            return watcher.events, contexts, feeds, access, listed, dead

    events, contexts, feeds, access, listed, dead = asyncio.run(scenario())
    assert [d["code"] for d in dead] == ["invalid"] and "names no resourceId" in dead[0]["reason"], dead
    assert access == {"alpha-t1": 200, "alpha-t2": 200, "beta-t1": 403, "gamma-t2": 403,
                      "feed alpha-t2": 200, "feed beta-t1": 403}, access
    assert sorted(t["threadId"] for t in listed["threads"]) == ["alpha-t1", "alpha-t2"]

    observations = {r: contexts[threads[r][0]]["observations"] for r in RESOURCES}
    checked = Counter()
    for event in events:
        resource = event.memory_key.split(":", 1)[1]
        text = encode(event).decode()
        for needle in _foreign(resource, threads, observations):
            assert needle not in text, (event.type, event.memory_key, needle)
        checked["events"] += 1
    for resource in RESOURCES:
        forbidden = _foreign(resource, threads, observations)
        mine = threads[resource]
        for thread in mine:
            context = contexts[thread]
            body = orjson.dumps(context).decode()
            assert all(needle not in body for needle in forbidden), thread
            # The memory is the user's: both threads' sections, the same log in both views.
            assert context["memoryKey"] == f"resource:{resource}"
            assert {i for i, _ in section_bodies(context["observations"])} == {shown_thread_id(t, True) for t in mine}
            assert context["observations"] == observations[resource]
            assert f"{resource.upper()}-SECRET" in body
            checked["contexts"] += 1
            for frame in feeds[thread]:
                assert all(needle not in frame for needle in forbidden), (thread, frame[:200])
                checked["frames"] += 1
            # The thread's feed: its own messages, and its own pair of each shared cycle.
            accepted = [orjson.loads(f)["data"]["message"]["threadId"] for f in feeds[thread]
                        if '"type":"data-om-message-accepted"' in f]
            assert accepted and set(accepted) == {thread}
            ends = [orjson.loads(f)["data"] for f in feeds[thread] if '"type":"data-om-observation-end"' in f]
            assert ends and all(thread in e.get("threadIds", [thread]) for e in ends)
            checked["needles"] += len(forbidden)
    cycles = {e.data.cycle_id for e in events if e.type == "data-om-observation-start" and len(e.data.thread_ids) > 1}
    print(f"isolation: {checked['events']} events, {checked['contexts']} contexts, {checked['frames']} feed frames "
          f"checked against {checked['needles'] // checked['contexts']} foreign marks each; "
          f"{len(cycles)} cycles covered two threads; access {access}")
    assert cycles


async def _produce(client: OmClient, resource: str, thread: str, turns: int,
                   mine: asyncio.Event, theirs: asyncio.Event) -> int:
    """One agent loop on its own client: user message, step 0, reply, turn end; then a last
    step. The last step's log offset.  Two producers take turns (`mine` / `theirs`: each turn's
    records acknowledged before the other's), so the log interleaves their threads however the
    machine schedules the two tasks (a producer held up by a leader election must not leave
    the other to write all its turns first)."""
    for n in range(0, 2 * turns, 2):
        await mine.wait()
        mine.clear()
        user, reply = say(resource, thread, n, words=50), say(resource, thread, n + 1, words=50)
        await client.send_message(user)
        await client.step_started(thread, step_number=0, resource_id=resource, at=user.created_at,
                                  after_message_id=user.id)
        await client.send_message(reply)
        await client.turn_ended(thread, resource_id=resource, at=reply.created_at, after_message_id=reply.id)
        theirs.set()
    step = await client.step_started(thread, step_number=1, resource_id=resource, at=T0 + timedelta(hours=1))
    return step.offset


def test_two_producers_of_one_resource_make_the_memory_simulate_makes_of_the_log(new_env):
    options = om_options(scope="resource", observation={"messageTokens": 450, "bufferTokens": False},
                         reflection={"observationTokens": 700})
    env = new_env(options=options)
    env.start_worker()
    key = "resource:u1"
    topics = Topics(env.settings.namespace)
    turns = 7  # per producer: a user message and a reply each

    async def scenario():
        async with EventWatcher(env.settings) as watcher:
            async with OmClient(env.settings) as first, OmClient(env.settings) as second:
                left, right = asyncio.Event(), asyncio.Event()
                left.set()
                offsets = await asyncio.gather(_produce(first, "u1", "u1-left", turns, left, right),
                                               _produce(second, "u1", "u1-right", turns, right, left))
            await watcher.wait_for(settled(key, max(offsets), 2 * 2 * turns), timeout=90)
            log = [r for r in await read_all(env.settings, topics.log, idle=0.3) if r.key == key.encode()]
            return [e for e in watcher.events if e.memory_key == key], log

    started = time.monotonic()
    live, log = asyncio.run(scenario())
    took = time.monotonic() - started
    inputs = [decode_input(r.value) for r in sorted(log, key=lambda r: r.offset)]
    records = [r for r in inputs if not isinstance(r, ModelResult)]
    order = "".join("L" if r.thread_id == "u1-left" else "R" for r in records if isinstance(r, Message))
    sim = asyncio.run(simulate(records, env.settings.om))
    live, decided = without_holds(live)  # holds: when the model answered (tests/integration/test_export.py)

    assert [e.type for e in sim.events] == [e.type for e in live]
    assert [decided(e) for e in sim.events] == [decided(e) for e in live]
    # The memory itself: the simulated state's log is the one the read side rebuilds from the
    # live events, in both threads' views.
    state = sim.states[key]
    projection = ContextProjection(resource=ResourceRendering(True))
    for event in live:
        projection.apply_event(event)
    assert projection.threads["u1-left"].observations == projection.threads["u1-right"].observations \
        == state.observations
    sections = section_bodies(state.observations)
    assert {i for i, _ in sections} == {shown_thread_id(t, True) for t in ("u1-left", "u1-right")}
    observed = [i for e in live if e.type == "data-om-observation-end" for i in e.data.observed_message_ids]
    assert len(observed) == len(set(observed))  # no message observed twice
    shared = {e.data.cycle_id for e in live if e.type == "data-om-observation-start" and len(e.data.thread_ids) == 2}
    reflections = sum(e.type == "data-om-observation-end" and e.data.operation_type == "reflection" for e in live)
    switches = sum(a != b for a, b in zip(order, order[1:]))
    print(f"two producers: {len(records)} log records (messages in log order {order}, {switches} switches), "
          f"{len(live)} events equal to om simulate's, {len(shared)} two-thread cycles, {reflections} reflections, "
          f"{len(observed)} messages observed once, {len(sections)} sections; live run {took:.1f} s")
    assert switches >= 4 and shared and reflections


_HISTORY = re.compile(r"## New Message History to Observe\n(.*?)\n## Your Task", re.DOTALL)
_THREAD_TAG = re.compile(r'^<thread id="([^"]+)">$', re.MULTILINE)


def _job_threads(job: ModelJob, shown: dict[str, str]) -> tuple[str, ...]:
    """The threads a multi-thread observer request transcribes, in its order (not the previous
    observations' sections, which come before the history)."""
    text = "\n".join(m.content if isinstance(m.content, str) else orjson.dumps(m.content).decode()
                     for m in job.messages if m.role == "user")
    history = _HISTORY.search(text.replace("\\n", "\n"))
    assert history is not None, text[:500]
    return tuple(shown[i] for i in _THREAD_TAG.findall(history.group(1)))


def expected_batches(pending: dict[str, list[tuple[str, int, object]]], threshold: int,
                     max_per_batch: int) -> list[tuple[str, ...]]:
    """The rule of spec §6.10, written again from its text: threads largest first until the
    picked tokens reach the threshold; the picked ones by their oldest message; consecutive
    threads in one batch while it stays within `max_per_batch`."""
    sizes = {t: count_messages([tokens for _, tokens, _ in ms]) for t, ms in pending.items() if ms}
    oldest = {t: min(at for _, _, at in pending[t]) for t in sizes}
    picked, total = [], 0
    for thread in sorted(sizes, key=lambda t: (-sizes[t], oldest[t])):
        if picked and total >= threshold:
            break
        picked.append(thread)
        total += sizes[thread]
    batches: list[list[str]] = []
    for thread in sorted(picked, key=lambda t: oldest[t]):
        if batches and sum(sizes[t] for t in batches[-1]) + sizes[thread] <= max_per_batch:
            batches[-1].append(thread)
        else:
            batches.append([thread])
    return [tuple(b) for b in batches]


def test_batches_of_one_cycle_run_side_by_side_and_follow_the_rule(new_env):
    latency_ms, threshold, per_batch = 1500, 450, 320
    options = om_options(scope="resource", observation={
        "messageTokens": threshold, "bufferTokens": False, "maxTokensPerBatch": per_batch,
        "modelSettings": {"latencyMs": latency_ms}})
    env = new_env(options=options)
    env.start_worker(env={"OM_MODEL_CONCURRENCY": "4"})
    threads = [f"u1-{name}" for name in ("north", "east", "south", "west")]
    shown = {shown_thread_id(t, True): t for t in threads}
    topics = Topics(env.settings.namespace)

    async def scenario():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            n = 0
            for round_ in range(9):  # round after round, each thread a message of its own length
                for k, thread in enumerate(threads):
                    # Once, a long message: its thread alone reaches the threshold (picked alone).
                    words = 400 if (round_, k) == (5, 3) else 12 + 9 * k
                    await client.send_message(say("u1", thread, n, words=words))
                    n += 1
            step = await client.step_started(threads[0], step_number=0, resource_id="u1",
                                             at=T0 + timedelta(hours=1))
            await watcher.wait_for(settled("resource:u1", step.offset, n), timeout=60)
            jobs = [ModelJob.model_validate_json(r.value)
                    for r in await read_all(env.settings, topics.jobs, idle=0.3)]
            results = [r for r in (decode_input(x.value) for x in await read_all(env.settings, topics.log, idle=0.3))
                       if isinstance(r, ModelResult)]
            return watcher.events, jobs, results

    events, jobs, results = asyncio.run(scenario())
    # The pending messages of every thread when each cycle started, from the events alone.
    pending: dict[str, list[tuple[str, int, object]]] = {t: [] for t in threads}
    planned: dict[str, list[tuple[str, ...]]] = {}
    sizes: dict[str, dict[str, int]] = {}
    for event in sorted(events, key=lambda e: e.seq):
        if event.type == "om-message-accepted":
            m = event.data.message
            pending[m.thread_id].append((m.id, m.tokens.count, m.created_at))
        elif event.type == "data-om-observation-start" and event.data.cycle_id not in planned:
            planned[event.data.cycle_id] = expected_batches(pending, threshold, per_batch)
            sizes[event.data.cycle_id] = {t[3:]: count_messages([c for _, c, _ in ms]) for t, ms in pending.items()}
        elif event.type == "data-om-observation-end":
            gone = set(event.data.observed_message_ids)
            pending[event.thread_id] = [p for p in pending[event.thread_id] if p[0] not in gone]
    by_job = {r.cycle_id: r for r in results}
    multi = 0
    for cycle, expected in planned.items():
        batch_jobs = sorted((j for j in jobs if j.cycle_id.startswith(f"{cycle}/")), key=lambda j: j.cycle_id)
        actual = [_job_threads(j, shown) for j in batch_jobs]
        assert actual == expected, (cycle, actual, expected)
        answered = [by_job[j.cycle_id] for j in batch_jobs]
        t0 = min(r.started_at for r in answered)
        spans = [(round((r.started_at - t0).total_seconds() * 1000), round((r.completed_at - t0).total_seconds() * 1000))
                 for r in answered]
        print(f"cycle {cycle[:8]}: pending tokens {sizes[cycle]}, batches {[[t[3:] for t in b] for b in actual]}, "
              f"calls (start, end ms) {spans}")
        if len(answered) > 1:
            multi += 1
            # Side by side: every call started before any of them ended.  (Not also "all ended
            # within latency x calls": that is the same claim as a time, which a loaded machine's
            # scheduling can stretch while the calls still overlap.)
            assert max(r.started_at for r in answered) < min(r.completed_at for r in answered), spans
    assert multi >= 2 and any(sum(map(len, b)) < len(threads) for b in planned.values()), planned
