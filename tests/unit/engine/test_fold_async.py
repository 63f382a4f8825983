"""Async buffering and activation in the fold (spec §6.2–§6.4, §15 items 3 and 6)."""

from datetime import timedelta

from omstream.engine.fold import fold, new_state
from omstream.schemas.control import StepStarted, TurnEnded
from omstream.schemas.messages import Message
from tests.helpers import T0, engine, message, scripted_result


class Loop:
    """Folds inputs; `settle()` answers every queued job with the scripted models."""

    def __init__(self, config) -> None:
        self.config, self.state = config, new_state("thread:t1", "t1", "u1")
        self.events, self.queue = [], []

    def __call__(self, item):
        out = fold(self.state, item, self.config)
        self.state = out.state
        self.events += out.events
        self.queue += out.jobs
        return out

    def settle(self):
        while self.queue:
            self(scripted_result(self.queue.pop(0)))

    def types(self, since=0):
        return [e.type.removeprefix("data-om-") for e in self.events[since:]
                if e.type not in ("data-om-status", "om-message-accepted")]


def step(n: int, at, model: str | None = None, after: str | None = None) -> StepStarted:
    return StepStarted(thread_id="t1", step_number=n, at=at, model=model, after_message_id=after)


def buffered_loop(**observation):
    loop = Loop(engine(600, observation={"bufferTokens": 0.2, **observation}, checkThresholdsAt="step"))
    for i in range(4):  # each turn crosses a 120-token interval: one chunk per turn
        loop(message(i, words=40))
        loop(step(0, message(i).created_at, after=f"t1-m{i}"))
        loop.settle()
    return loop


def test_chunks_are_buffered_in_order_and_activation_with_ratio_1_moves_them_all():
    loop = buffered_loop(bufferActivation=1.0)
    chunks = loop.state.chunks
    assert len(chunks) >= 2 and loop.state.observations == ""  # buffered, not yet active
    assert [c.message_ids for c in chunks] == sorted(c.message_ids for c in chunks)
    i = len(loop.state.seen)
    loop(message(i, words=400))  # crosses the threshold
    out = loop(step(0, message(i).created_at, after=f"t1-m{i}"))
    activations = [e for e in out.events if e.type == "data-om-activation"]
    assert [a.data.cycle_id for a in activations] == [c.cycle_id for c in chunks]  # all, in order
    newest = max(message(int(m.split("-m")[-1])).created_at for m in chunks[-1].message_ids)
    assert loop.state.cursor == newest


def test_activation_needs_no_model_call():
    loop = buffered_loop()
    i = len(loop.state.seen)
    loop(message(i, words=300))
    out = loop(step(0, message(i).created_at, after=f"t1-m{i}"))
    assert "activation" in [e.type.removeprefix("data-om-") for e in out.events]
    assert all(job.kind == "buffer" for job in out.jobs)  # the activation itself asked for nothing


def test_idle_activation_reports_the_ttl():
    loop = buffered_loop(activateAfterIdle="5m")
    later = message(3).created_at + timedelta(minutes=6)
    out = loop(step(0, later))
    activation = [e for e in out.events if e.type == "data-om-activation"][0]
    assert activation.data.triggered_by == "ttl"
    assert activation.data.last_activity_at == round(message(3).created_at.timestamp() * 1000)
    assert activation.data.ttl_expired_ms == 60_000


def test_provider_change_activates():
    loop = Loop(engine(600, observation={"bufferTokens": 0.2, "activateOnProviderChange": True},
                       checkThresholdsAt="step"))
    for i in range(4):
        msg = message(i, words=40)
        if msg.role == "assistant":
            msg = Message.model_validate({**msg.model_dump(exclude={"metadata"}),
                                          "metadata": {"provider": "openai", "model": "gpt-4o"}})
        loop(msg)
        loop(step(0, msg.created_at, model="openai/gpt-4o", after=msg.id))
        loop.settle()
    assert loop.state.chunks
    out = loop(step(0, message(4).created_at, model="anthropic/claude-sonnet-4"))
    activation = [e for e in out.events if e.type == "data-om-activation"][0]
    assert activation.data.triggered_by == "provider_change"
    assert (activation.data.previous_model, activation.data.current_model) == ("openai/gpt-4o", "anthropic/claude-sonnet-4")


def test_buffer_on_idle_buffers_at_turn_end_below_the_minimum():
    config = engine(2000, observation={"bufferTokens": 0.2, "bufferOnIdle": True}, checkThresholdsAt="step")
    loop = Loop(config)
    loop(message(0, words=5))
    out = loop(TurnEnded(thread_id="t1", at=message(0).created_at, after_message_id="t1-m0"))
    assert [j.kind for j in out.jobs] == ["buffer"]
    quiet = Loop(engine(2000, observation={"bufferTokens": 0.2}, checkThresholdsAt="step"))
    quiet(message(0, words=5))
    assert quiet(TurnEnded(thread_id="t1", at=T0, after_message_id="t1-m0")).jobs == ()


def test_block_after_waits_for_the_buffer_in_flight_then_observes_the_rest():
    loop = Loop(engine(600, observation={"bufferTokens": 0.2}, checkThresholdsAt="message"))
    loop(message(0, words=150))  # crosses the first interval: a buffer starts
    assert loop.state.buffering is not None
    out = loop(message(1, words=600))  # far past blockAfter (720) while the buffer runs
    assert loop.state.in_flight is not None and loop.state.in_flight.kind == "buffer"
    # The check waits: no status until the buffer is back (the message is accepted, though).
    assert [e.type for e in out.events] == ["om-message-accepted"]
    held = loop(message(2, words=10))  # held, behind the buffer the check waits for
    assert len(loop.state.held) == 1
    assert [(e.type, e.data.cycle_id) for e in held.events] == [("om-input-held", loop.state.in_flight.cycle_id)]
    loop.settle()
    # The buffer's end activates it and its check observes the rest at once: the input waits on.
    assert loop.types()[:8] == ["buffering-start", "om-input-held", "buffering-end", "activation",
                                "observation-start", "om-input-held", "observation-end", "om-input-released"]
    assert [m.id for m in loop.state.pending] == ["t1-m2"]  # folded after the blocking cycle
    assert loop.state.held == () and loop.state.in_flight is None


def test_a_buffer_never_cuts_a_tool_exchange_in_half():
    loop = Loop(engine(2000, observation={"bufferTokens": 0.1}, checkThresholdsAt="step"))
    call = Message.model_validate({
        "id": "t1-call", "threadId": "t1", "role": "assistant", "createdAt": T0 + timedelta(minutes=5),
        "content": [{"type": "text", "text": "checking the weather " * 30},
                    {"type": "tool-call", "toolCallId": "c1", "toolName": "weather", "args": {"city": "Oslo"}}]})
    loop(message(0, words=200))
    loop(call)
    out = loop(step(0, call.created_at, after="t1-call"))  # the newest message waits for its result
    buffered = [job for job in out.jobs if job.kind == "buffer"]
    assert buffered and buffered[0].input_tokens < loop.state.pending[0].tokens + 30
    history = buffered[0].messages[1].content.split("## New Message History")[1]
    assert "[0]" in history and "weather" not in history


def test_temporal_markers_reach_the_observer_and_the_agent():
    from omstream.projections.views.context import ContextProjection

    loop = Loop(engine(300, temporalMarkers=True))
    first, later = message(0, words=20), message(2, words=20)
    later = later.model_copy(update={"created_at": first.created_at + timedelta(hours=2, minutes=15)})
    for item in (first, message(1, words=20).model_copy(update={"created_at": first.created_at}), later):
        loop(item)
    gap = [e for e in loop.events if e.type == "om-temporal-gap"]
    assert len(gap) == 1 and gap[0].data.gap_text == "2 hours 15 minutes later"
    assert gap[0].data.precedes_message_id == later.id
    for i in range(3, 12):
        loop(message(i, words=40).model_copy(update={"created_at": later.created_at + timedelta(seconds=i)}))
    job = next(j for j in loop.queue if j.kind == "observe")
    # Right after its message, as a time-less Signal line (spec §14).
    assert ("\nUser (11:15 AM): [2] " in job.messages[1].content
            and "\nSignal: 2 hours 15 minutes later — 03/03/2025, 11:15 AM UTC\nAssistant: [3]"
            in job.messages[1].content)
    projection = ContextProjection()
    for event in loop.events:
        projection.apply_event(event)
    reminder = projection.view("t1").messages[gap[0].data.marker_id]
    assert reminder.text().startswith("<system-reminder>2 hours 15 minutes later — ")


# --- activation against the persisted pending count (spec §6.4 step 5) ------------------------
def _two_chunks_and_a_tail(reported: int, **state_fields):
    """Turn 2 of the long thread in numbers: chunks of 647 and 1 271 message tokens, a live
    count of 3 161 (over the 3 000 threshold) and `reported` as the previous step's count."""
    from omstream.engine.state import BufferedChunk, PendingMessage

    def pending(i, tokens):
        return PendingMessage(id=f"t1-m{i}", role="user" if i % 2 == 0 else "assistant",
                              created_at=T0 + timedelta(minutes=i), text=f"[{i}]", tokens=tokens)

    messages = (pending(0, 623), pending(1, 600), pending(2, 671), pending(3, 600), pending(4, 643))
    chunks = (
        BufferedChunk(cycle_id="c1", observations="* 🔴 (09:00) one", tokens=7, message_ids=("t1-m0",),
                      message_tokens=647, last_observed_at=T0),
        BufferedChunk(cycle_id="c2", observations="* 🔴 (09:01) two", tokens=9,
                      message_ids=("t1-m1", "t1-m2"), message_tokens=1271,
                      last_observed_at=T0 + timedelta(minutes=2)),
    )
    state = new_state("thread:t1", "t1", "u1").model_copy(update={
        "pending": messages, "chunks": chunks, "pending_message_tokens": reported,
        "seen": {m.id: "x" for m in messages}, **state_fields})
    config = engine(3000, observation={"bufferTokens": 0.2, "bufferActivation": 0.8, "blockAfter": 1.2},
                    checkThresholdsAt="step")
    return fold(state, step(0, T0 + timedelta(minutes=5)), config)


def test_activation_plans_against_the_pending_count_the_previous_step_reported():
    # currentPending 1 894: target 1 294; two chunks (1 918) overshoot by 624 > 0.95 × 600,
    # one chunk (647) leaves 1 247 ≥ 600, so one chunk activates, as the original does.
    out = _two_chunks_and_a_tail(reported=1894)
    activated = [e.data.cycle_id for e in out.events if e.type == "data-om-activation"]
    assert activated == ["c1"]
    assert [c.cycle_id for c in out.state.chunks] == ["c2"]
    # The record's count is lowered by what was activated, then the status persists the live one.
    status = [e for e in out.events if e.type == "data-om-status"][-1]
    assert out.state.pending_message_tokens == status.data.windows.active.messages.tokens == 3161 - 623
    # Planned against the live count (3 161) instead, both chunks would go.
    out = _two_chunks_and_a_tail(reported=3161)
    assert [e.data.cycle_id for e in out.events if e.type == "data-om-activation"] == ["c1", "c2"]


def test_with_no_persisted_count_activation_plans_against_the_buffered_message_tokens():
    # 0 persisted: currentPending = 647 + 1 271 = 1 918, target 1 318 → one chunk again.
    out = _two_chunks_and_a_tail(reported=0)
    assert [e.data.cycle_id for e in out.events if e.type == "data-om-activation"] == ["c1"]


# --- the log after an activation (spec §3.4) ---------------------------------------------------
EARLIER = "Date: Mar 2, 2025\n* 🔴 (18:00) earlier"


def test_one_activation_appends_one_boundary_and_adds_the_chunks_token_counts():
    from omstream.projections.views.context import ContextProjection, observation_context_chunks

    out = _two_chunks_and_a_tail(reported=3161, observations=EARLIER, observation_tokens=50)
    assert [e.data.cycle_id for e in out.events if e.type == "data-om-activation"] == ["c1", "c2"]
    # One boundary, stamped with the last chunk's cursor, then the chunks a blank line apart.
    assert out.state.observations == (
        EARLIER + "\n\n--- message boundary (2025-03-03T09:02:00.000Z) ---\n\n"
        + "* 🔴 (09:00) one\n\n* 🔴 (09:01) two")
    # Added, not recounted: the boundary line costs nothing.
    assert out.state.observation_tokens == 50 + 7 + 9
    # The context projection rebuilds the same log from the per-chunk markers; the agent sees
    # the activation as one observation chunk after the earlier one.
    projection = ContextProjection()
    projection.view("t1").observations = EARLIER
    for event in out.events:
        projection.apply_event(event)
    assert projection.view("t1").observations == out.state.observations
    assert observation_context_chunks(out.state.observations) == [
        "Date: Mar 2, 2025\n* 🔴 (18:00) earlier", "* 🔴 (09:00) one\n\n* 🔴 (09:01) two"]


def test_consecutive_activations_each_write_their_boundary():
    from omstream.projections.views.context import ContextProjection

    loop = buffered_loop(bufferActivation=1.0)
    i = len(loop.state.seen)
    loop(message(i, words=400))
    out = loop(step(0, message(i).created_at, after=f"t1-m{i}"))
    # Step 0 activates against the reported count, the threshold pipeline the rest: two
    # activations of one chunk each (the first on an empty log needs no boundary).
    assert len([e for e in out.events if e.type == "data-om-activation"]) == 2
    assert loop.state.observations.count("--- message boundary") == 1
    projection = ContextProjection()
    for event in loop.events:
        projection.apply_event(event)
    assert projection.view("t1").observations == loop.state.observations


# --- event order inside a step ------------------------------------------------------------------
def test_a_step_reports_its_status_before_its_buffer_announces_itself():
    loop = Loop(engine(600, observation={"bufferTokens": 0.2}, checkThresholdsAt="step"))
    loop(message(0, words=100))
    out = loop(step(0, message(0).created_at, after="t1-m0"))
    assert [e.type for e in out.events] == ["data-om-status", "data-om-buffering-start"]
    status, start = out.events
    assert status.data.windows.buffered.observations.status == "running"  # already in flight
    assert [e.seq for e in out.events] == [status.seq, status.seq + 1]
    assert [j.cycle_id for j in out.jobs] == [start.data.cycle_id]


def _activated(**observation):
    """A buffered loop whose chunks all activate at the next step; (loop, the step's events)."""
    loop = buffered_loop(bufferActivation=1.0, **observation)
    i = len(loop.state.seen)
    loop(message(i, words=400))
    return loop, loop(step(0, message(i).created_at, after=f"t1-m{i}")).events


def test_buffered_observations_keep_their_continuation_hints_through_activation():
    """The documentation: buffered observations carry `currentTask` / `suggestedResponse`, kept
    after activation, so the default (async) configuration shows them to the agent."""
    from omstream.projections.views.context import ContextProjection, context_messages

    loop, events = _activated()
    chunks = {e.data.cycle_id: e.data for e in loop.events if e.type == "data-om-buffering-end"}
    activations = [e.data for e in events if e.type == "data-om-activation"]
    assert activations and all(chunks[a.cycle_id].current_task for a in activations)
    assert [(a.current_task, a.suggested_response) for a in activations] == [
        (chunks[a.cycle_id].current_task, chunks[a.cycle_id].suggested_response) for a in activations]
    assert (loop.state.current_task, loop.state.suggested_response) == (
        activations[-1].current_task, activations[-1].suggested_response)
    projection = ContextProjection()
    for event in loop.events:
        projection.apply_event(event)
    shown = [m["content"] for m in context_messages(projection.view("t1")) if m["role"] == "system"]
    assert f"<current-task>\n{loop.state.current_task}\n</current-task>" in shown


def test_without_continuation_hints_buffered_chunks_carry_none():
    loop, events = _activated(continuationHints=False)
    ends = [e.data for e in loop.events if e.type in ("data-om-buffering-end", "data-om-activation")]
    assert ends and not any(d.current_task or d.suggested_response for d in ends)
    assert loop.state.current_task is None
