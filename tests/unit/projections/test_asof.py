"""The context window as of a seq (`projections/views/asof.py`) and its route, without a broker: a
memory's events from the pure fold, kept in an `EventHistory`, folded up to each seq."""

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from omstream.engine.fold import fold
from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.web import build_web_app
from omstream.projections.views.asof import context_as_of, fold_until, parse_seq
from omstream.projections.views.context import ContextProjection
from omstream.projections.views.history import EventHistory
from omstream.schemas.control import StepStarted, ThreadDeleted
from omstream.settings import Settings
from tests.helpers import engine, fold_inputs, message, scripted_result

KEY = "thread:t1"


def lifecycle(messages: int = 10):
    """Messages and steps of thread t1 with a blocking observer at 300 tokens, every cycle answered."""
    config = engine(300)
    inputs = []
    for i in range(messages):
        inputs += [message(i), StepStarted(thread_id="t1", step_number=0, at=message(i).created_at,
                                           after_message_id=f"t1-m{i}")]
    state, events, jobs, _ = fold_inputs(inputs, config)
    pending = list(jobs)
    while pending:
        out = fold(state, scripted_result(pending.pop(0)), config)
        state, events, pending = out.state, events + list(out.events), pending + list(out.jobs)
    return state, events, config


def history_of(events) -> EventHistory:
    history = EventHistory()
    history.extend(events)
    return history


def test_each_seq_shows_what_the_events_up_to_it_say():
    _, events, _ = lifecycle()
    history = history_of(events)
    ends = [e for e in events if e.type == "data-om-observation-end"]
    assert ends, [e.type for e in events]
    first_end = ends[0].seq
    for seq in range(0, len(events) + 1):
        answer = context_as_of(history, KEY, "t1", seq)
        upto = [e for e in events if e.seq <= seq]
        accepted = {e.data.message.id for e in upto if e.type == "om-message-accepted"}
        observed = {i for e in upto if e.type == "data-om-observation-end" for i in e.data.observed_message_ids}
        # Every accepted message is either raw in the window or covered by an observation.
        assert {m["id"] for m in answer["messages"]} == accepted - observed, seq
        assert set(answer["observedMessageIds"]) == observed
        assert (answer["observations"] == "") == (seq < first_end)
        assert answer["asOf"] == seq and answer["lastSeq"] == len(events)
        starts = {e.data.cycle_id for e in upto if e.type == "data-om-observation-start"}
        done = {e.data.cycle_id for e in upto if e.type in ("data-om-observation-end", "data-om-observation-failed")}
        holds = [e for e in upto if e.type in ("om-input-held", "om-input-released")]
        holding = bool(holds) and holds[-1].type == "om-input-held"
        assert answer["blocked"] == (bool(starts - done) or holding), seq
        assert (answer["held"] is not None) == holding, seq
        statuses = [e for e in upto if e.type == "data-om-status"]
        expected = statuses[-1].data.windows.wire() if statuses else None
        assert answer["windows"] == expected
        if seq:
            assert answer["event"]["seq"] == seq and answer["event"]["type"].startswith("data-om-")
    print(f"\n{len(events)} events, first observation at seq {first_end}, {len(ends)} cycles")


def test_the_last_seq_is_the_live_window_and_later_seqs_stop_there():
    _, events, _ = lifecycle()
    history = history_of(events)
    live = ContextProjection()
    for event in events:
        live.apply_event(event)
    now = live.view("t1").snapshot()
    for seq in (len(events), len(events) + 50):
        answer = context_as_of(history, KEY, "t1", seq)
        assert {k: answer[k] for k in now} == now
        assert answer["asOf"] == len(events)


def test_before_the_first_event_the_memory_is_empty():
    _, events, _ = lifecycle(2)
    answer = context_as_of(history_of(events), KEY, "t1", 0)
    assert answer["asOf"] == 0 and answer["event"] is None and answer["windows"] is None
    assert answer["messages"] == [] and answer["observations"] == "" and answer["threadId"] == "t1"


def test_a_deleted_or_unknown_memory_has_no_past():
    state, events, config = lifecycle(2)
    history = history_of(events)
    assert context_as_of(history, "thread:other", "other", 3) is None
    history.extend(fold(state, ThreadDeleted(thread_id="t1", at=message(5).created_at), config).events)
    assert context_as_of(history, KEY, "t1", 3) is None


def test_fold_until_stops_at_the_seq_in_order():
    _, events, _ = lifecycle(4)
    entries = history_of(events).since(KEY, 0)
    projection, last, _ = fold_until(entries, 5)
    assert last.seq == 5 and projection.last_seq[KEY] == 5


@pytest.mark.parametrize("raw,ok", [("0", 0), ("17", 17), ("-1", None), ("x", None), ("1.5", None), ("", None)])
def test_parse_seq(raw, ok):
    if ok is None:
        with pytest.raises(ValueError):
            parse_seq(raw)
    else:
        assert parse_seq(raw) == ok


def test_the_route_answers_as_of_a_seq_and_refuses_bad_ones():
    _, events, _ = lifecycle()
    feed = ProjectionFeed(Settings())
    feed.ready = True
    for event in events:
        feed.projection.apply_event(event)
        feed.history.append(event)
    end = next(e for e in events if e.type == "data-om-observation-end")
    first_end = end.seq

    async def scenario():
        client = TestClient(TestServer(build_web_app(feed)))
        await client.start_server()
        try:
            before = await (await client.get("/threads/t1/context", params={"asOf": str(first_end - 1)})).json()
            after = await (await client.get("/threads/t1/context", params={"asOf": str(first_end)})).json()
            live = await (await client.get("/threads/t1/context", params={"wait": "0"})).json()
            bad = await client.get("/threads/t1/context", params={"asOf": "soon"})
            unknown = await client.get("/threads/nobody/context", params={"asOf": "3"})
            return before, after, live, (bad.status, await bad.json()), (unknown.status, await unknown.json())
        finally:
            await client.close()

    before, after, live, bad, unknown = asyncio.run(scenario())
    assert before["observations"] == "" and after["observations"]
    ids = {m["id"] for m in before["messages"]}
    assert {m["id"] for m in after["messages"]} == ids - set(end.data.observed_message_ids) != ids
    assert "asOf" not in live and live["observations"]
    assert bad[0] == 400 and bad[1]["error"] == "bad-parameter"
    assert unknown[0] == 404 and unknown[1]["error"] == "unknown-thread"
