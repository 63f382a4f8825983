"""The context-window projection: what the agent sees, rebuilt from the topics alone.

It folds the events of `<ns>.events`, and nothing else, into one view per thread: the
observation text, the hints, and the messages no observation covers yet.  Messages come from the
fold's `om-message-accepted` events, never from the input log, so a message the fold refused or
the worker dead-lettered never reaches an agent, and `om-memory-deleted` drops the memory's
views: a rebuild replays the events in order, so deleted messages never come back.  Every
message is in exactly one of the two: its id is either in an `observation-end`'s
`observedMessageIds` or still listed raw.  Events are applied once per `(memoryKey, seq)`, so a
re-sent event after a worker crash changes nothing.

The window itself (spec §10), as chat messages in this order:

1. system: the preamble + `\\n\\n` + the usage instructions (KNOWLEDGE UPDATES, PLANNED ACTIONS,
   MOST RECENT USER INPUT, …, and omstream's own WHAT YOU DO NOT KNOW);
2. system (resource scope only, when given): the other conversations block;
3. system: the literal `<observations>` (no closing tag is ever sent, as in the original);
4. one system message per boundary-delimited chunk of the log, after the context transform
   (`optimize_observations_for_context`, then dates annotated relative to "now") — older chunks
   stay byte-identical while "now" stays on the same day, which is what prompt caching needs;
5. system `<current-task>\\n…\\n</current-task>` and `<suggested-response>\\n…\\n</suggested-response>`
   when the thread has them;
6. user: the continuation reminder (`om-continuation`, dated the epoch so it sorts before history);
7. the raw messages no observation covers yet, with their tool calls, tool results, images and
   files in OpenAI shape (`projections/views/chat.py`).

Nothing of 1-6 is sent while the log is empty.

"Now" is event time, never the wall clock: a view remembers the newest time it has seen for its
thread (message `createdAt`s and event `eventTime`s), so the same log always renders the same
window; callers may pass an explicit `now` instead.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from omstream.engine.prompting.observations import append_observations, continue_chunk
from omstream.engine.rules.resolution import ResolvedRetrieval
from omstream.projections.views.chat import ChatMessage, chat_messages
from omstream.projections.views.resource_views import (
    ResourceRendering,
    is_resource_key,
    merge_thread_observations,
    one_thread_of_resource,
    other_conversations,
    share,
)
from omstream.projections.views.working_memory import (
    WorkingMemoryRendering,
    state_signal,
)
from omstream.schemas import events as e
from omstream.schemas.base import iso
from omstream.schemas.config.extractors import WORKING_MEMORY_SLUG
from omstream.schemas.messages import Message

from .system_messages import (
    CONTINUATION,
    CONTINUATION_HINT,
    CONTINUATION_ID,
    INSTRUCTIONS,
    PREAMBLE,
    build_context_system_messages,
    continuation_message,
    observation_context_chunks,
    optimize_observations_for_context,
    other_conversations_block,
)

__all__ = [
    "CONTINUATION",
    "CONTINUATION_HINT",
    "CONTINUATION_ID",
    "INSTRUCTIONS",
    "PREAMBLE",
    "ContextProjection",
    "ContextWindow",
    "ThreadView",
    "build_context_system_messages",
    "build_context_window",
    "context_messages",
    "continuation_message",
    "observation_context_chunks",
    "optimize_observations_for_context",
    "other_conversations_block",
]

#: The events that change what every thread of a resource memory shares (`resource_views`).
_MEMORY_WIDE = (e.ObservationStart, e.ObservationEnd, e.ObservationFailed, e.Activation, e.InputHeld,
                e.InputReleased)

@dataclass(frozen=True)
class ContextWindow:
    """One rendering of a thread's window: the injected part and the raw tail."""

    now: datetime | None
    system: tuple[str, ...]                 # empty when nothing is injected
    continuation: dict[str, Any] | None     # None when nothing is injected
    messages: tuple[Message, ...]
    state_signals: tuple[dict[str, Any], ...] = ()  # `{id, cacheKey, content}` (working memory)

    def chat(self) -> list[ChatMessage]:
        """Ready-to-send chat messages (OpenAI / litellm shape), tool history included; a state
        signal is a user message after the system messages."""
        chat: list[ChatMessage] = [{"role": "system", "content": content} for content in self.system]
        chat += [{"role": "user", "content": signal["content"]} for signal in self.state_signals]
        if self.continuation is not None:
            chat.append({"role": "user", "content": CONTINUATION})
        return chat + chat_messages(self.messages)


# --- the projection ---------------------------------------------------------------------------
def _zone(time_zone: str | tzinfo) -> tzinfo:
    return ZoneInfo(time_zone) if isinstance(time_zone, str) else time_zone


@dataclass
class ThreadView:
    thread_id: str
    memory_key: str | None = None
    # A dict, or the read model's lazily decoded mapping (projections/store/view_rows.py).
    messages: MutableMapping[str, Message] = field(default_factory=dict)
    observed: set[str] = field(default_factory=set)
    observations: str = ""
    cursor: str | None = None
    generation: int = 0
    current_task: str | None = None
    suggested_response: str | None = None
    # Extractor values by slug, the latest of each (spec §9), and the thread's title.
    extracted: dict[str, Any] = field(default_factory=dict)
    title: str | None = None
    in_flight: set[str] = field(default_factory=set)
    last_seq: int = 0
    events: int = 0
    cycles: int = 0
    # The last observation activation marker applied: (seq, activatedAt, cursor).
    last_activation: tuple[int, Any, str | None] | None = None
    # The last blocking cycle's failure, until a cycle ends well (`lastFailure` of the snapshot).
    last_failure: dict[str, Any] | None = None
    # The inputs the memory holds behind a cycle, as `om-input-held` last told it (`held` of the
    # snapshot): {"count", "cycleId", "since"}; None when it holds none.
    held: dict[str, Any] | None = None
    # The newest event time seen for this thread: the window's "now".
    clock: datetime | None = None
    # The zone the observer's calendar dates were written in (the transcript's zone).
    time_zone: str | tzinfo = "UTC"
    # The configuration's retrieval (recall guidance, groups shown as sections); None when off.
    retrieval: ResolvedRetrieval | None = None
    # How the working-memory document is shown (`workingMemory`); None when there is none.
    working_memory: WorkingMemoryRendering | None = None

    @property
    def blocked(self) -> bool:
        """A blocking cycle is in flight, or the memory holds inputs (behind a buffer at
        `blockAfter`, which is a background cycle on the events): the window is about to change."""
        return bool(self.in_flight) or self.held is not None

    @property
    def resource_id(self) -> str | None:
        """The thread's resource: its messages' `resourceId` (or its resource-scope memory key)."""
        found = next((m.resource_id for m in self.messages.values() if m.resource_id), None)
        if found is None and (self.memory_key or "").startswith("resource:"):
            return str(self.memory_key).split(":", 1)[1]
        return found

    def saw(self, at: datetime | None) -> None:
        """Advance the view's clock to `at` if it is newer."""
        if at is not None and (self.clock is None or at > self.clock):
            self.clock = at

    def unobserved(self) -> list[Message]:
        rest = [self.messages[i] for i in self.messages if i not in self.observed]
        return sorted(rest, key=lambda m: m.created_at)

    def window(self, now: datetime | None = None) -> ContextWindow:
        return build_context_window(self, now=now)

    def snapshot(self, now: datetime | None = None, other_conversations: str | None = None) -> dict[str, Any]:
        """The context answer; `other_conversations` is the resource's other threads' block
        (`ContextProjection.snapshot` gives it)."""
        raw = self.unobserved()
        window = build_context_window(self, raw, now=now, other_conversations=other_conversations or None)
        return {
            "threadId": self.thread_id,
            "memoryKey": self.memory_key,
            "otherConversations": other_conversations or None,
            "generation": self.generation,
            "cursor": self.cursor,
            "blocked": self.blocked,
            "now": iso(window.now) if window.now is not None else None,
            "observations": self.observations,
            "currentTask": self.current_task,
            "suggestedResponse": self.suggested_response,
            "extractedValues": self.extracted,
            "title": self.title,
            "workingMemory": self.extracted.get(WORKING_MEMORY_SLUG),
            "stateSignals": list(window.state_signals),
            "cycles": self.cycles,
            "lastFailure": self.last_failure,
            "held": self.held,
            "observedMessageIds": sorted(self.observed),
            "messages": [m.wire() for m in raw],
            "chat": window.chat(),
        }


def build_context_window(view: ThreadView, raw: list[Message] | None = None, *,
                         now: datetime | None = None, time_zone: str | tzinfo | None = None,
                         other_conversations: str | None = None) -> ContextWindow:
    """The window of `view` at `now` (default: the newest event time the view has seen).

    `raw` defaults to the view's unobserved messages; `time_zone` to the view's.
    """
    at = now if now is not None else view.clock
    raw = view.unobserved() if raw is None else raw
    system = build_context_system_messages(
        view.observations, current_task=view.current_task, suggested_response=view.suggested_response,
        other_conversations=other_conversations, now=at, extracted=view.extracted,
        zone=_zone(time_zone if time_zone is not None else view.time_zone), retrieval=view.retrieval,
        working_memory=view.working_memory)
    signal = (state_signal(view.working_memory, view.extracted.get(WORKING_MEMORY_SLUG))
              if view.working_memory is not None else None)
    resource_id = next((m.resource_id for m in raw if m.resource_id), None)
    return ContextWindow(
        now=at,
        system=tuple(system or ()),
        # Recall guidance alone (no observations yet) continues nothing.
        continuation=continuation_message(view.thread_id, resource_id) if system and view.observations else None,
        messages=tuple(raw),
        state_signals=(signal,) if signal is not None else (),
    )


def context_messages(view: ThreadView, raw: list[Message] | None = None, *,
                     now: datetime | None = None, time_zone: str | tzinfo | None = None) -> list[ChatMessage]:
    """The window as ready-to-send chat messages (OpenAI / litellm shape).

    `now` decides the relative dates (`(3 weeks ago)`, `[1 month later]`, `likely already
    happened`); without it the view's own clock is used, never the wall clock.
    """
    return build_context_window(view, raw, now=now, time_zone=time_zone).chat()


class ContextProjection:
    """Per-thread views, fed event by event from `<ns>.events`."""

    def __init__(self, time_zone: str | tzinfo = "UTC", retrieval: ResolvedRetrieval | None = None, *,
                 resource: ResourceRendering = ResourceRendering(),
                 working_memory: WorkingMemoryRendering | None = None) -> None:
        self.threads: dict[str, ThreadView] = {}
        self.time_zone = time_zone
        self.retrieval = retrieval
        self.working_memory = working_memory
        # Resource scope: how the fold writes thread ids and transcripts (the log's sections,
        # the other-conversation blocks), and each resource memory's threads, in the order they
        # joined it (a dict as an ordered set).
        self.resource = resource
        self._members: dict[str, dict[str, None]] = {}
        # The newest seq applied per memory key.  Kept here, not on a view, so an event re-sent
        # after a crash cannot bring back a view that a later deletion dropped.
        self.last_seq: dict[str, int] = {}
        # Threads whose view changed, and threads dropped, since the last `take_changes`: what a
        # store writes after a batch (projections/store/store.py), instead of every view; at most one
        # entry per thread ever seen when nothing takes them (an in-memory feed).
        self._touched: set[str] = set()
        self._dropped: set[str] = set()
        _zone(time_zone)  # an unknown zone fails here, not on the first request

    def take_changes(self) -> tuple[set[str], set[str]]:
        """(threads changed, threads dropped) since the last call; a thread dropped then made
        again is in both."""
        changes = (self._touched, self._dropped)
        self._touched, self._dropped = set(), set()
        return changes

    def view(self, thread_id: str) -> ThreadView:
        if thread_id not in self.threads:
            self.threads[thread_id] = ThreadView(thread_id, time_zone=self.time_zone, retrieval=self.retrieval,
                                                 working_memory=self.working_memory)
        return self.threads[thread_id]

    def adopt(self, views: dict[str, ThreadView]) -> None:
        """Views made elsewhere (loaded from the store) join the projection, with its settings
        (and, in resource scope, their memories' thread lists)."""
        for thread_id, view in views.items():
            view.retrieval = self.retrieval
            view.working_memory = self.working_memory
            if is_resource_key(view.memory_key):
                self._members.setdefault(str(view.memory_key), {})[thread_id] = None
        self.threads.update(views)

    def siblings(self, view: ThreadView) -> list[ThreadView]:
        """The views of every thread of `view`'s resource memory, `view` included ([view] in
        thread scope)."""
        if not is_resource_key(view.memory_key):
            return [view]
        return [self.threads[t] for t in self._members.get(str(view.memory_key), {}) if t in self.threads]

    def other_conversations(self, view: ThreadView) -> str | None:
        """Resource scope: the other threads' unobserved messages as `view`'s window shows
        them (`<other-conversation>` blocks); None in thread scope or when there are none."""
        if not is_resource_key(view.memory_key):
            return None
        blocks = other_conversations(view, self.siblings(view), self.resource, str(self.time_zone))
        return blocks or None

    def snapshot(self, thread_id: str, now: datetime | None = None) -> dict[str, Any]:
        """The thread's context answer, other conversations included (`KeyError` for a thread
        the projection does not know)."""
        view = self.threads[thread_id]
        return view.snapshot(now, other_conversations=self.other_conversations(view))

    def window(self, thread_id: str, now: datetime | None = None) -> ContextWindow:
        """The thread's window, other conversations included (`KeyError` as `snapshot`)."""
        view = self.threads[thread_id]
        return build_context_window(view, now=now, other_conversations=self.other_conversations(view))

    def _join(self, view: ThreadView, memory_key: str) -> None:
        """`view` belongs to `memory_key`; a thread new to a resource memory takes the memory's
        shared fields (its observation log, generation, cursor, cycle in flight) and its
        working-memory document, the resource's."""
        if view.memory_key == memory_key or not is_resource_key(memory_key):
            view.memory_key = memory_key
            return
        members = self._members.setdefault(memory_key, {})
        known = next((self.threads[t] for t in members if t in self.threads and t != view.thread_id), None)
        view.memory_key = memory_key
        members[view.thread_id] = None
        if known is not None:
            share(known, [view])
            if WORKING_MEMORY_SLUG in known.extracted:
                view.extracted.setdefault(WORKING_MEMORY_SLUG, known.extracted[WORKING_MEMORY_SLUG])

    def apply_event(self, event: Any) -> bool:
        """Apply one `<ns>.events` record; False if it was a duplicate or not for a thread."""
        if event.seq <= self.last_seq.get(event.memory_key, 0):
            return False
        self.last_seq[event.memory_key] = event.seq
        if isinstance(event, e.MemoryDeleted):
            self._drop(event)
            return True
        if isinstance(event, e.MessageAccepted):
            # In resource scope the envelope names the memory's thread; the message knows its own.
            message = event.data.message
            view = self.view(message.thread_id)
            view.messages.setdefault(message.id, message)
            view.saw(message.created_at)
        elif event.thread_id is None:
            return False
        else:
            view = self.view(event.thread_id)
        self._touched.add(view.thread_id)
        view.last_seq = event.seq
        self._join(view, event.memory_key)
        view.events += 1
        view.saw(getattr(event, "event_time", None))
        values = getattr(event.data, "extracted_values", None)
        if values:
            view.extracted.update(values)
            if WORKING_MEMORY_SLUG in values:  # the memory's document: every thread of it shows it
                for other in self.siblings(view):
                    other.extracted[WORKING_MEMORY_SLUG] = values[WORKING_MEMORY_SLUG]
                    self._touched.add(other.thread_id)
        apply = _APPLY.get(type(event))
        if apply is not None:
            apply(self, view, event)
        if isinstance(event, _MEMORY_WIDE) and is_resource_key(event.memory_key):
            self._touched.update(share(view, self.siblings(view)))
        return True

    # One method per event that changes a view beyond what every event does (`apply_event`).
    def _thread_update(self, view: ThreadView, event: e.ThreadUpdate) -> None:
        view.title = event.data.new_title

    def _observation_start(self, view: ThreadView, event: e.ObservationStart) -> None:
        view.in_flight.add(event.data.cycle_id)

    def _observation_failed(self, view: ThreadView, event: e.ObservationFailed) -> None:
        data = event.data
        view.in_flight.discard(data.cycle_id)
        # Why the context holds raw messages that should have been observed (a reader
        # that waited for a blocking cycle learns how it ended).
        view.last_failure = {"cycleId": data.cycle_id, "operationType": data.operation_type,
                             "error": data.error, "failedAt": iso(data.failed_at)}

    def _observation_end(self, view: ThreadView, event: e.ObservationEnd) -> None:
        data: Any = event.data  # as the wire has it: an observation's cursor is not checked here
        view.in_flight.discard(data.cycle_id)
        view.last_failure = None
        view.cycles += 1
        if data.operation_type == "reflection":
            # A reflection is a new generation: its text replaces the whole log.
            view.observations = data.observations or ""
            view.suggested_response = data.suggested_response or view.suggested_response
        else:
            view.observed.update(data.observed_message_ids)
            if data.observations and is_resource_key(event.memory_key):
                view.observations = merge_thread_observations(
                    view, data.observations, data.observed_message_ids, data.cursor,
                    self.resource.obscure_thread_ids)
            elif data.observations:
                view.observations = append_observations(view.observations, data.observations, data.cursor)
            view.cursor = data.cursor
            view.current_task = data.current_task
            view.suggested_response = data.suggested_response
        view.generation = data.generation

    def _activation(self, view: ThreadView, event: e.Activation) -> None:
        data = event.data
        if data.operation_type == "observation":
            view.cycles += 1
            view.observed.update(data.activated_message_ids)
            view.observations = _apply_activation(view, event)
            view.cursor = data.cursor
            view.current_task = data.current_task
            view.suggested_response = data.suggested_response
        else:  # a buffered reflection became the new generation
            view.observations = data.observations or ""
            view.generation = data.generation_count

    def _working_memory_updated(self, view: ThreadView, event: e.WorkingMemoryUpdated) -> None:
        """The agent's document; in resource scope every thread of the memory shows it."""
        for other in self.siblings(view):
            other.extracted[WORKING_MEMORY_SLUG] = event.data.working_memory
            self._touched.add(other.thread_id)

    def _input_held(self, view: ThreadView, event: e.InputHeld) -> None:
        since = view.held["since"] if view.held is not None else iso(event.event_time)
        view.held = {"count": event.data.held, "cycleId": event.data.cycle_id, "since": since}

    def _input_released(self, view: ThreadView, event: e.InputReleased) -> None:
        view.held = None

    def _temporal_gap(self, view: ThreadView, event: e.TemporalGap) -> None:
        view.messages.setdefault(event.data.marker_id, temporal_gap_message(event))

    def _drop(self, event: Any) -> None:
        """Forget the views of a deleted memory (all of a resource's threads in resource scope);
        a thread deleted from a resource memory leaves alone, the others keep the observations
        the event says remain."""
        key, thread_id = event.memory_key, event.thread_id
        members = self._members.get(key, {})
        if one_thread_of_resource(event):
            gone = [thread_id] if thread_id in self.threads else []
            members.pop(thread_id, None)
            remaining = getattr(event.data, "observations", None)
            for other in members:
                if remaining is not None and other in self.threads:
                    self.threads[other].observations = remaining
                    self._touched.add(other)
        else:
            gone = [t for t, v in self.threads.items() if v.memory_key == key or t == thread_id]
            self._members.pop(key, None)
        for tid in gone:
            del self.threads[tid]
            self._touched.discard(tid)
            self._dropped.add(tid)


#: What each kind of event does to its thread's view (the others only count and date it).
_APPLY: dict[type[e.EventEnvelope], Callable[[ContextProjection, ThreadView, Any], None]] = {
    e.ThreadUpdate: ContextProjection._thread_update,
    e.ObservationStart: ContextProjection._observation_start,
    e.ObservationFailed: ContextProjection._observation_failed,
    e.ObservationEnd: ContextProjection._observation_end,
    e.Activation: ContextProjection._activation,
    e.TemporalGap: ContextProjection._temporal_gap,
    e.WorkingMemoryUpdated: ContextProjection._working_memory_updated,
    e.InputHeld: ContextProjection._input_held,
    e.InputReleased: ContextProjection._input_released,
}


def _apply_activation(view: ThreadView, event: Any) -> str:
    """The log after one chunk's activation marker.

    An activation appends one boundary and then its chunks' texts (spec §3.4) but sends one
    marker per chunk (§6.4 step 7), back to back with the same time and cursor: a marker that
    directly follows one of the same activation continues its chunk of the log.
    """
    data = event.data
    previous, view.last_activation = view.last_activation, (event.seq, data.activated_at, data.cursor)
    text = data.observations or ""
    if previous == (event.seq - 1, data.activated_at, data.cursor):
        return continue_chunk(view.observations, text)
    return append_observations(view.observations, text, data.cursor)


def temporal_gap_message(event: Any) -> Message:
    """The gap reminder as the agent reads it (spec §14), one millisecond before its message."""
    data = event.data
    return Message(
        id=data.marker_id, thread_id=event.thread_id, role="user",
        content=f"<system-reminder>{data.contents}</system-reminder>",
        created_at=datetime.fromtimestamp((data.timestamp_ms - 1) / 1000, tz=UTC),
    )
