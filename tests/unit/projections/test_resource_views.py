"""The read side of a resource memory (spec §6.10): every thread's view is what the fold holds.

A resource memory is driven through the engine (several threads, interleaved, cycles covering
one or several threads, reflections, temporal gaps), and its events are projected as `om serve`
projects them.  After every input, each thread's view must show the memory's observation log
exactly as the fold holds it (the threads' sections merged by date), its generation and cursor,
and the other threads' unobserved messages exactly as the fold's own threshold counts them
(`<other-conversation>` blocks); each thread's feed must show its own events and the
memory-wide ones, never another thread's start/end pair.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from omstream.engine.prompting.sections import shown_thread_id
from omstream.engine.prompting.window import other_conversations
from omstream.engine.rules.resource import pending_by_thread
from omstream.projections.views.asof import context_as_of
from omstream.projections.views.context import ContextProjection
from omstream.projections.views.history import EventHistory
from omstream.projections.views.resource_views import ResourceRendering, concerns
from omstream.schemas.messages import Message
from tests.helpers import T0, text_of
from tests.unit.engine.resource_helpers import Memory, resource_engine, say

THREADS = ("thread-a", "thread-b", "thread-c")


def _conversation(gaps: bool) -> list[Message]:
    """Three threads taking turns irregularly; with `gaps`, some user messages come 20 minutes
    after their thread's previous one (a temporal-gap marker each)."""
    order = [0, 0, 1, 0, 2, 1, 1, 2, 0, 2, 2, 1, 0, 0, 1, 2, 2, 0, 1, 1, 0, 2, 0, 1]
    messages = []
    for n, t in enumerate(order):
        message = say(n, THREADS[t])
        if gaps and n % 6 == 4:
            message = message.model_copy(update={"created_at": message.created_at + timedelta(minutes=20 + n)})
        messages.append(message)
    # Later messages never precede earlier ones: a gap moves the rest of the run along.
    shifted, last = [], T0
    for message in messages:
        at = max(message.created_at, last + timedelta(seconds=30))
        shifted.append(message.model_copy(update={"created_at": at}))
        last = at
    return shifted


def _check(memory: Memory, projection: ContextProjection) -> int:
    """Every thread's view against the fold's state; the number of non-empty blocks checked."""
    state, config = memory.state, memory.config
    blocks = 0
    for thread in {m.thread_id for m in memory.sent}:
        view = projection.threads[thread]
        snapshot = projection.snapshot(thread)
        assert view.memory_key == state.memory_key
        assert view.observations == state.observations, thread
        assert view.generation == state.generation
        assert view.blocked == (state.in_flight is not None)
        expected = other_conversations(state, thread, config)
        assert (snapshot["otherConversations"] or "") == expected, thread
        blocks += bool(expected)
        mine = {m.id for m in pending_by_thread(state).get(thread, ())}
        assert {m["id"] for m in snapshot["messages"]} == mine, thread
    return blocks


@pytest.mark.parametrize("obscure", [True, False], ids=["obscured", "plain"])
@pytest.mark.parametrize("gaps", [False, True], ids=["steady", "gaps"])
@pytest.mark.parametrize("retrieval", [False, True], ids=["bare", "groups"])
def test_every_thread_view_is_the_memory_the_fold_holds(obscure, gaps, retrieval):
    config = resource_engine(message_tokens=400, obscureThreadIds=obscure, temporalMarkers=gaps, retrieval=retrieval,
                             observation={"maxTokensPerBatch": 250}, reflection={"observationTokens": 700})
    memory = Memory(config)
    projection = ContextProjection(resource=ResourceRendering(obscure))
    applied = blocks = 0
    for message in _conversation(gaps):
        memory.feed(message)
        memory.answer_all()
        for event in memory.events[applied:]:
            projection.apply_event(event)
        applied = len(memory.events)
        blocks += _check(memory, projection)
    cycles = {e.data.cycle_id for e in memory.of_type("data-om-observation-end")
              if e.data.operation_type == "observation"}
    shared = [c for c in cycles if len({e.thread_id for e in memory.of_type("data-om-observation-end")
                                         if e.data.cycle_id == c}) > 1]
    reflections = [e for e in memory.of_type("data-om-observation-end") if e.data.operation_type == "reflection"]
    gap_markers = memory.of_type("om-temporal-gap")
    print(f"{len(memory.events)} events, {len(cycles)} observation cycles ({len(shared)} over several threads), "
          f"{len(reflections)} reflections, {len(gap_markers)} gaps, {blocks} other-conversation blocks checked")
    assert shared and reflections and blocks
    assert bool(gap_markers) == gaps
    assert ('<thread id="thread-a">' in memory.state.observations) != obscure
    assert ("<observation-group " in memory.state.observations) == retrieval


def test_a_thread_new_to_the_resource_takes_its_log_and_as_of_rebuilds_it():
    config = resource_engine(message_tokens=200)
    memory = Memory(config)
    for n in range(8):
        memory.feed(say(n, THREADS[n % 2]))
        memory.answer_all()
    late = Message(id="late-1", thread_id="thread-z", resource_id="u1", role="user", content=text_of(20, 99),
                   created_at=T0 + timedelta(hours=1))
    memory.feed(late)
    memory.answer_all()
    projection = ContextProjection(resource=ResourceRendering(True))
    history = EventHistory()
    for event in memory.events:
        projection.apply_event(event)
        history.append(event)
    assert memory.state.observations and projection.threads["thread-z"].observations == memory.state.observations
    last = memory.events[-1].seq
    for thread in ("thread-a", "thread-b", "thread-z"):
        answer = context_as_of(history, memory.state.memory_key, thread, last, resource=ResourceRendering(True))
        assert answer is not None
        assert {k: v for k, v in answer.items() if k in ("observations", "otherConversations", "messages")} == \
            {k: v for k, v in projection.snapshot(thread).items() if k in ("observations", "otherConversations",
                                                                            "messages")}


def test_a_thread_feed_shows_its_own_pair_of_a_shared_cycle_and_the_memory_wide_events():
    config = resource_engine(message_tokens=300, observation={"maxTokensPerBatch": 10_000},
                             reflection={"observationTokens": 400})
    memory = Memory(config)
    for n in range(16):
        memory.feed(say(n, THREADS[n % 2]))
        memory.answer_all()
    feed = {t: [e for e in memory.events if concerns(e, t)] for t in THREADS[:2]}
    for thread, events in feed.items():
        ends = [e for e in events if e.type == "data-om-observation-end" and e.data.operation_type == "observation"]
        assert ends and all(e.thread_id == thread for e in ends)
        assert all(e.data.message.thread_id == thread for e in events if e.type == "om-message-accepted")
        ids = [(e.type, e.data.cycle_id) for e in events if e.type.startswith("data-om-observation")]
        assert len(ids) == len(set(ids)), "one part per type and cycle id on a thread's feed"
    shared = [e for e in memory.of_type("data-om-observation-start") if len(e.data.thread_ids) > 1]
    reflections = [e for e in memory.events if getattr(e.data, "operation_type", None) == "reflection"]
    assert shared and reflections
    assert all(e in feed[t] for e in reflections for t in feed)
    print(f"thread feeds: {len(feed['thread-a'])} + {len(feed['thread-b'])} of {len(memory.events)} events; "
          f"{len(shared)} shared-cycle starts, {len(reflections)} reflection events on both")


def test_a_stored_resource_projection_reads_back_and_resumes_as_built_in_memory(tmp_path):
    from dataclasses import replace

    from omstream.projections.feed import ProjectionFeed
    from omstream.projections.store.store import ReadModelStore
    from omstream.schemas.codec import encode
    from omstream.settings import Settings

    config = resource_engine(message_tokens=400, observation={"maxTokensPerBatch": 250})
    memory = Memory(config)
    for message in _conversation(gaps=False):
        memory.feed(message)
        memory.answer_all()
        # Stop where the memory has observations and two threads with unobserved messages.
        if memory.state.observations and len(pending_by_thread(memory.state)) > 1 and len(memory.sent) > 12:
            break
    records = [(offset, encode(e.model_copy(update={"input_offset": offset, "input_last": True})), None)
               for offset, e in enumerate(memory.events)]
    batches = [{0: records[i:i + 9]} for i in range(0, len(records), 9)]
    settings = replace(Settings(), om=config.om)

    def fed(some, store=None) -> ProjectionFeed:
        feed = ProjectionFeed(settings, store=store)
        feed._load("t.events/1", {0: 10**9})
        for batch in some:
            feed._apply_batch(batch)
        return feed

    def windows(feed: ProjectionFeed) -> dict:
        return {t: feed.projection.snapshot(t) for t in sorted(feed.projection.threads)}

    built = windows(fed(batches))
    assert set(built) == set(THREADS) and all(w["observations"] == memory.state.observations for w in built.values())
    assert any(w["otherConversations"] for w in built.values())
    half = fed(batches[:4], ReadModelStore(tmp_path / "rm.sqlite"))
    half.store.close()
    resumed = fed(batches[4:], ReadModelStore(tmp_path / "rm.sqlite"))
    assert windows(resumed) == built
    resumed.store.close()
    assert windows(fed([], ReadModelStore(tmp_path / "rm.sqlite"))) == built


def test_one_thread_deleted_from_a_resource_takes_its_view_and_events_only():
    from omstream.projections.views.resource_views import of_thread
    from omstream.schemas.control import ThreadDeleted

    memory = Memory(resource_engine(message_tokens=300))
    for n in range(10):
        memory.feed(say(n, THREADS[n % 2]))
        memory.answer_all()
    assert f'<thread id="{shown_thread_id("thread-a", True)}">' in memory.state.observations
    memory.feed(ThreadDeleted(thread_id="thread-a", resource_id="u1", at=T0 + timedelta(hours=1)))
    memory.answer_all()
    projection, history = ContextProjection(resource=ResourceRendering(True)), EventHistory()
    for event in memory.events:
        projection.apply_event(event)
        history.append(event)
    assert set(projection.threads) == {"thread-b"}
    # The other thread's view holds what the fold kept: the deleted thread's sections are gone.
    assert projection.threads["thread-b"].observations == memory.state.observations
    kept = history.since(memory.state.memory_key)
    assert kept and not any(of_thread(e.event, "thread-a") for e in kept)
    assert any(of_thread(e.event, "thread-b") for e in kept)
    assert shown_thread_id("thread-a", True) not in projection.threads["thread-b"].observations
    assert {m["id"] for m in projection.snapshot("thread-b")["messages"]} == \
        {m.id for m in pending_by_thread(memory.state).get("thread-b", ())}
