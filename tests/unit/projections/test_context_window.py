"""What the actor sees (spec §10, §15 item 12): the context window the projection renders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from omstream.engine.fold import fold, new_state
from omstream.engine.prompting.observations import append_observations
from omstream.projections.views.context import (
    CONTINUATION,
    CONTINUATION_HINT,
    CONTINUATION_ID,
    INSTRUCTIONS,
    PREAMBLE,
    ContextProjection,
    ThreadView,
    build_context_system_messages,
    build_context_window,
    context_messages,
    continuation_message,
    observation_context_chunks,
    optimize_observations_for_context,
    other_conversations_block,
)
from omstream.schemas.control import ThreadDeleted
from omstream.schemas.messages import Message
from tests.helpers import T0, engine, scripted_result, text_of

NOW = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)
SNAPSHOT_KEYS = {"threadId", "memoryKey", "generation", "cursor", "blocked", "now", "observations",
                 "currentTask", "suggestedResponse", "extractedValues", "title", "workingMemory", "cycles",
                 "lastFailure", "held", "stateSignals", "observedMessageIds", "messages", "chat", "otherConversations"}


def msg(i: int, at: datetime, role: str = "user", thread: str = "t1") -> Message:
    return Message(id=f"{thread}-m{i}", thread_id=thread, resource_id="u1", role=role,
                   content=f"message {i}", created_at=at)


def view_with(observations: str = "", *, raw: list[Message] = (), clock: datetime | None = None,
              **hints) -> ThreadView:
    view = ThreadView("t1", observations=observations, clock=clock, **hints)
    for m in raw:
        view.messages[m.id] = m
    return view


# --- nothing to inject -----------------------------------------------------------------------
def test_nothing_is_injected_while_the_log_is_empty():
    raw = [msg(0, T0), msg(1, T0 + timedelta(minutes=1), "assistant")]
    view = view_with(raw=raw, clock=T0, current_task="stale", suggested_response="stale")
    assert context_messages(view, raw) == [
        {"role": "user", "content": "message 0"}, {"role": "assistant", "content": "message 1"}]
    window = build_context_window(view)
    assert window.system == () and window.continuation is None
    assert build_context_system_messages("") is None
    assert context_messages(view_with()) == []


# --- the structure of §10 ----------------------------------------------------------------------
def test_window_structure_in_order():
    raw = [msg(5, NOW - timedelta(minutes=5)), msg(6, NOW, "assistant")]
    view = view_with("Date: Jun 14, 2025\n* 🔴 (10:00) User likes cats", raw=raw, clock=NOW,
                     current_task="Fix the login bug", suggested_response="Ask which browser")
    chat = context_messages(view, raw)
    assert chat == [
        {"role": "system", "content": f"{PREAMBLE}\n\n{INSTRUCTIONS}"},
        {"role": "system", "content": "<observations>"},
        {"role": "system", "content": "Date: Jun 14, 2025 (yesterday)\n* 🔴 (10:00) User likes cats"},
        {"role": "system", "content": "<current-task>\nFix the login bug\n</current-task>"},
        {"role": "system", "content": "<suggested-response>\nAsk which browser\n</suggested-response>"},
        {"role": "user", "content": CONTINUATION},
        {"role": "user", "content": "message 5"},
        {"role": "assistant", "content": "message 6"},
    ]
    assert not any("</observations>" in m["content"] for m in chat)  # the original never closes it


def test_preamble_and_instructions():
    assert PREAMBLE == "The following observations block contains your memory of past conversations with this user."
    headings = [p.split(":")[0] for p in INSTRUCTIONS.split("\n\n")]
    assert headings == ["IMPORTANT", "KNOWLEDGE UPDATES", "PLANNED ACTIONS", "MOST RECENT USER INPUT",
                        "SYSTEM REMINDERS", "WHAT YOU DO NOT KNOW"]  # the last one is omstream's own
    for words in ("most recent", "will start", "is switching", "changed to", "moved to", "in the past",
                  "<system-reminder>", "not mentioned"):
        assert words in INSTRUCTIONS


def test_optional_blocks_are_left_out_when_absent():
    system = build_context_system_messages("obs")
    assert system == [f"{PREAMBLE}\n\n{INSTRUCTIONS}", "<observations>", "obs"]
    only_task = build_context_system_messages("obs", current_task="Task A")
    assert only_task[-1] == "<current-task>\nTask A\n</current-task>"
    assert not any("<suggested-response>" in s for s in only_task)
    only_hint = build_context_system_messages("obs", suggested_response="Suggest B")
    assert only_hint[-1] == "<suggested-response>\nSuggest B\n</suggested-response>"
    assert not any("<current-task>" in s for s in only_hint)


def test_other_conversations_follow_the_preamble():
    other = '<other-conversation id="t2">\nhi\n</other-conversation>'
    system = build_context_system_messages("obs", other_conversations=other)
    assert system[1] == (
        "The following content is from OTHER conversations different from the current conversation, "
        "they're here for reference,  but they're not necessarily your focus:\nSTART_OTHER_CONVERSATIONS_BLOCK\n"
        '<other-conversation id="t2">\nhi\n</other-conversation>\nEND_OTHER_CONVERSATIONS_BLOCK')
    assert system[2] == "<observations>"
    assert other_conversations_block("x").startswith("The following content is from OTHER conversations")


def test_continuation_message_as_the_original_stores_it():
    message = continuation_message("thread-1", "res-1")
    assert message == {
        "id": "om-continuation", "role": "user", "createdAt": "1970-01-01T00:00:00.000Z",
        "content": {"format": 2, "parts": [{"type": "text", "text": CONTINUATION}]},
        "threadId": "thread-1", "resourceId": "res-1",
    }
    assert CONTINUATION_ID == "om-continuation"
    assert CONTINUATION == f"<system-reminder>{CONTINUATION_HINT}</system-reminder>"
    for words in ("latest message", "background", "suggested response", "Never mention memory",
                  "newer and take priority"):
        assert words in CONTINUATION_HINT
    window = build_context_window(view_with("obs", raw=[msg(0, NOW)], clock=NOW))
    assert window.continuation["id"] == CONTINUATION_ID and window.continuation["resourceId"] == "u1"


# --- the observation text as the actor reads it ------------------------------------------------
def test_context_transform_of_the_log():
    stored = ("Date: Jun 14, 2025\n[O1] * 🔴 (10:00) User prefers tea [preference, drinks]\n"
              "  [O1-N1] * 🟡 (10:01) Agent ran tests -> 3 failures\n"
              "* 🟢  (10:02) Maybe likes jazz\n* ✅ Tests pass, see [the log](http://x/log)\n"
              "* [72 items collapsed - ID: b1fa]\n\n\n\n* 🔴 (10:05) Done")
    assert optimize_observations_for_context(stored) == (
        "Date: Jun 14, 2025\n* 🔴 (10:00) User prefers tea \n * (10:01) Agent ran tests 3 failures\n"
        "* (10:02) Maybe likes jazz\n* ✅ Tests pass, see [the log](http://x/log)\n"
        "* [72 items collapsed - ID: b1fa]\n\n* 🔴 (10:05) Done")


def test_one_system_message_per_boundary_chunk_with_dates_relative_to_now():
    first = "Date: May 1, 2025\n* 🔴 (09:00) User will move to Lisbon (meaning May 20, 2025)"
    second = "Date: May 26, 2025\n* 🟡 (10:00) Moved"
    third = "Date: May 27, 2025\n* (11:00) Unpacked"
    text = append_observations(append_observations(first, second, "2025-05-01T09:30:00.000Z"),
                               third, "2025-05-26T10:30:00.000Z")
    view = view_with(text, clock=NOW)
    chunks = [m["content"] for m in context_messages(view)[2:5]]
    assert chunks == [
        "Date: May 1, 2025 (1 month ago)\n"
        "* 🔴 (09:00) User will move to Lisbon (meaning May 20, 2025 - 3 weeks ago, likely already happened)",
        "[3 weeks later]\n\nDate: May 26, 2025 (2 weeks ago)\n* (10:00) Moved",   # the gap opens the later chunk
        "Date: May 27, 2025 (2 weeks ago)\n* (11:00) Unpacked",
    ]
    assert view.observations == text  # the stored text is never modified


def test_older_chunks_stay_byte_identical_when_a_chunk_is_appended():
    text = "Date: May 1, 2025\n* a"
    before = observation_context_chunks(text, NOW)
    for day in (2, 20, 30):
        text = append_observations(text, f"Date: May {day}, 2025\n* b{day}", f"2025-05-{day:02d}T09:00:00.000Z")
        after = observation_context_chunks(text, NOW)
        assert after[:len(before)] == before and len(after) == len(before) + 1
        before = after


def test_without_any_time_the_dates_are_left_as_written():
    view = view_with("Date: May 1, 2025\n* x (meaning May 2, 2025)")
    assert context_messages(view)[2]["content"] == "Date: May 1, 2025\n* x (meaning May 2, 2025)"


def test_an_explicit_now_overrides_the_views_clock():
    view = view_with("Date: Jun 14, 2025\n* x", clock=NOW)
    assert context_messages(view)[2]["content"] == "Date: Jun 14, 2025 (yesterday)\n* x"
    later = context_messages(view, now=NOW + timedelta(days=25))
    assert later[2]["content"] == "Date: Jun 14, 2025 (3 weeks ago)\n* x"
    assert view.snapshot(now=NOW + timedelta(days=400))["chat"][2]["content"] == "Date: Jun 14, 2025 (1 year ago)\n* x"


def test_header_dates_are_read_in_the_projection_time_zone():
    projection = ContextProjection(time_zone="America/Los_Angeles")
    view = projection.view("t1")
    view.observations = "Date: Jun 14, 2025\n* x"
    view.saw(datetime(2025, 6, 15, 6, 30, tzinfo=UTC))  # 23:30 on the 14th in Los Angeles
    assert context_messages(view)[2]["content"] == "Date: Jun 14, 2025 (today)\n* x"
    assert context_messages(view, time_zone="UTC")[2]["content"] == "Date: Jun 14, 2025 (yesterday)\n* x"
    assert context_messages(view, time_zone=ZoneInfo("Asia/Tokyo"))[2]["content"] == \
        "Date: Jun 14, 2025 (yesterday)\n* x"
    with pytest.raises(Exception):  # noqa: B017 - zoneinfo raises its own error type
        ContextProjection(time_zone="Mars/Olympus")


# --- the projection over a real log -------------------------------------------------------------
def _long_run(n: int = 14, gap_days: int = 4):
    """A thread whose messages are `gap_days` apart, observed by the scripted observer."""
    config = engine(300)
    state, events, messages = new_state("thread:t1", "t1", "u1"), [], []
    for i in range(n):
        m = Message(id=f"t1-m{i}", thread_id="t1", resource_id="u1", role="user" if i % 2 == 0 else "assistant",
                    content=text_of(60, i), created_at=T0 + timedelta(days=gap_days * i))
        messages.append(m)
        out = fold(state, m, config)
        state, events = out.state, events + list(out.events)
        for job in out.jobs:
            done = fold(state, scripted_result(job), config)
            state, events = done.state, events + list(done.events)
    return messages, events, state


def _project(messages, events):
    """The events into one projection: the read side's only source (`messages` are there only
    to keep the call sites readable; the projection never sees them)."""
    projection = ContextProjection()
    for event in events:
        projection.apply_event(event)
    return projection.view("t1")


def test_now_is_the_newest_event_time_of_the_thread_never_the_wall_clock():
    messages, events, state = _long_run()
    view = _project(messages, events)
    newest = max([m.created_at for m in messages] + [e.event_time for e in events])
    assert view.clock == newest == state.clock
    snap = view.snapshot()
    assert snap["now"] == "2025-04-24T09:00:00.000Z"
    chat = snap["chat"]
    assert chat[1] == {"role": "system", "content": "<observations>"}
    # relative to April 24 2025 (the log's own time), whatever today's date is
    assert chat[2]["content"].startswith("Date: Mar 3, 2025 (1 month ago)\n* 🔴 (09:00) User said:")
    assert "\n\n[4 days later]\n\nDate: Mar 7, 2025 (1 month ago)\n* (09:00) Assistant replied:" in chat[2]["content"]
    assert view.snapshot() == snap  # rendering twice gives the same window


def test_one_chunk_message_per_observation_cycle():
    messages, events, state = _long_run()
    view = _project(messages, events)
    chat = context_messages(view)
    ends = [e for e in events if e.type == "data-om-observation-end"]
    start = chat.index({"role": "system", "content": "<observations>"}) + 1
    chunks = [m["content"] for m in chat[start:start + len(ends)]]
    assert len(ends) >= 3 and all(c.startswith(("Date: ", "[")) for c in chunks)
    assert chat[start + len(ends)]["content"].startswith("<current-task>\n")
    assert chat[start + len(ends) + 1]["content"].startswith("<suggested-response>\n")
    assert chat[start + len(ends) + 2] == {"role": "user", "content": CONTINUATION}
    raw = chat[start + len(ends) + 3:]
    assert [m["content"] for m in raw] == [m.text() for m in view.unobserved()]
    assert [m.id for m in view.unobserved()] == list(state.pending_ids)


def test_every_message_comes_from_the_fold_with_the_count_it_used():
    messages, events, state = _long_run()
    accepted = [e for e in events if e.type == "om-message-accepted"]
    assert [e.data.message.id for e in accepted] == [m.id for m in messages]
    assert all(e.data.message.tokens is not None and e.data.message.tokens.counter == "tokenx"
               for e in accepted)
    view = _project(messages, events)
    assert [m.id for m in view.unobserved()] == list(state.pending_ids)


def test_a_refused_message_never_reaches_the_window():
    config = engine(100_000)
    first = Message(id="m1", thread_id="t1", role="user", content="the real one", created_at=T0)
    forged = first.model_copy(update={"content": "a different message under the same id"})
    state, events = new_state("thread:t1", "t1", None), []
    for m in (first, forged, first):  # a conflict (dead-lettered) and a duplicate (ignored)
        out = fold(state, m, config)
        state, events = out.state, events + list(out.events)
    view = _project([], events)
    assert [m.text() for m in view.unobserved()] == ["the real one"]


def test_a_deleted_thread_never_comes_back_when_the_projection_is_rebuilt():
    messages, events, state = _long_run(n=6)
    deleted = fold(state, ThreadDeleted(thread_id="t1", at=T0 + timedelta(days=60)), engine(300))
    later = Message(id="t1-new", thread_id="t1", role="user", content="starting over",
                    created_at=T0 + timedelta(days=61))
    again = fold(deleted.state, later, engine(300))
    log = events + list(deleted.events) + list(again.events)
    for _ in range(2):  # a rebuild is the same replay
        projection = ContextProjection()
        for event in log:
            projection.apply_event(event)
        view = projection.view("t1")
        assert [m.id for m in view.unobserved()] == ["t1-new"]
        assert view.observations == "" and not view.observed
    for event in events:  # a re-sent old event after the deletion changes nothing
        assert not projection.apply_event(event)
    assert [m.id for m in projection.view("t1").unobserved()] == ["t1-new"]


def test_duplicate_events_change_nothing():
    messages, events, _ = _long_run()
    reference = _project(messages, events).snapshot()
    assert _project(messages, events + events[::-1]).snapshot() == reference


def test_snapshot_keeps_its_fields():
    messages, events, _ = _long_run(n=3)
    snap = _project(messages, events).snapshot()
    assert set(snap) == SNAPSHOT_KEYS
    assert snap["observations"] == "" and snap["cycles"] == 0 and snap["blocked"] is False
    assert snap["chat"] == [{"role": "user" if m.role == "user" else "assistant", "content": m.text()}
                            for m in messages]
    assert snap["now"] == "2025-03-11T09:00:00.000Z"
