"""`projections/views/activity.py`: what a memory is doing now, the one derivation both dashboard pages
show (`GET /dashboard/activity`).  The events are the demo conversation's under async buffering,
folded with the scripted models (`om simulate`'s path): each status is written by a step, so
between a background cycle's end and the next step the status still says `running, 0 chunks`."""

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from omstream.api_tokens import TokenTable, grants_from_text
from omstream.cli.common import EXAMPLES
from omstream.conversations.files import read_conversation
from omstream.conversations.simulation import simulate
from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.web import build_web_app
from omstream.projections.views.activity import ActivityIndex
from omstream.projections.views.history import EventHistory
from omstream.settings import Settings, read_config_file

T0_MS = 1_800_000_000_000


@pytest.fixture(scope="module")
def events():
    from omstream.schemas.config import load_om_config

    om = load_om_config(read_config_file(EXAMPLES / "simulate.toml"))
    sim = asyncio.run(simulate(read_conversation(EXAMPLES / "demo-conversation.jsonl"), om))
    return sim.events


def figures_after(events, last: int) -> dict:
    """The memory's figures with the events up to index `last`, each appended 1 s after the one before."""
    history = EventHistory()
    for i, event in enumerate(events[: last + 1]):
        history.append(event, T0_MS + 1000 * i)
    return ActivityIndex(history).of(events[0].memory_key).answer()


def index_of(events, kind: str, nth: int = 0) -> int:
    return [i for i, e in enumerate(events) if e.type == kind][nth]


def test_a_background_cycle_in_flight_is_running_from_its_start_events_append_time(events):
    start = index_of(events, "data-om-buffering-start")
    answer = figures_after(events, start)
    [cycle] = answer["running"]
    assert cycle["label"] == "buffering observations" and answer["labels"] == ["buffering observations"]
    assert cycle["startedMs"] == T0_MS + 1000 * start  # the wall clock of its append, not its event time
    assert cycle["startedAt"] == events[start].data.wire()["startedAt"]
    assert answer["buffered"]["observations"]["status"] == "running"


def test_after_the_buffer_ended_the_card_is_complete_before_the_next_step(events):
    end = index_of(events, "data-om-buffering-end")
    status = max(i for i in range(end) if events[i].type == "data-om-status")
    stale = events[status].data.windows.buffered.observations
    assert (stale.status, stale.chunks) == ("running", 0)  # what the card showed until the next step
    answer = figures_after(events, end)
    assert answer["running"] == [] and answer["labels"] == []
    observations = answer["buffered"]["observations"]
    assert (observations["status"], observations["chunks"]) == ("complete", 1)
    assert observations["messageTokens"] == events[end].data.tokens_buffered
    assert observations["projectedMessageRemoval"] is None  # a step computes it: unknown until the next
    assert answer["statusSeq"] == events[status].seq and answer["seq"] == events[end].seq


def test_an_activation_takes_its_chunks_out_of_the_buffer(events):
    activation = index_of(events, "data-om-activation")
    answer = figures_after(events, activation)
    assert answer["buffered"]["observations"]["chunks"] == 0
    assert answer["buffered"]["observations"]["status"] in ("idle", "running")


def test_figures_are_brought_up_to_date_incrementally(events):
    history = EventHistory()
    index = ActivityIndex(history)
    seen = []
    for i, event in enumerate(events):
        history.append(event, T0_MS + i)
        seen.append(index.of(event.memory_key).answer())
    assert seen[-1] == figures_after(events, len(events) - 1)
    assert any(a["running"] for a in seen) and not seen[-1]["running"]


def test_the_route_shows_each_token_only_its_threads(events):
    feed = ProjectionFeed(Settings())
    for event in events:
        feed.projection.apply_event(event)
        feed.history.append(event, T0_MS)
    tokens = TokenTable(grants_from_text("all-0123456789abcdef = *\nbob-0123456789abcdef = bob"))

    async def scenario():
        client = TestClient(TestServer(build_web_app(feed, tokens=tokens)))
        await client.start_server()
        try:
            answers = []
            for token, query in (("all-0123456789abcdef", ""), ("bob-0123456789abcdef", ""),
                                 ("all-0123456789abcdef", "&threadId=nobody"), (None, "")):
                r = await client.get(f"/dashboard/activity?x=1{query}" + (f"&access_token={token}" if token else ""))
                answers.append((r.status, await r.json()))
            return answers
        finally:
            await client.close()

    (s1, every), (s2, bobs), (s3, nobody), (s4, _) = asyncio.run(scenario())
    assert (s1, s2, s3, s4) == (200, 200, 200, 401)
    assert list(every["threads"]) == ["trip-planning"] and every["threads"]["trip-planning"]["labels"] == []
    assert bobs == {"threads": {}} and nobody == {"threads": {}}  # alice's thread is not bob's
