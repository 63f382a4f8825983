"""What one fold call works with: the resolved configuration and the outputs it collects."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import orjson

from omstream.schemas.config import OmConfig
from omstream.schemas.events import (
    BufferingEnd,
    BufferingFailed,
    BufferingStart,
    EventEnvelope,
    InputHeld,
    InputReleased,
    MarkerConfig,
    ObservationEnd,
    ObservationFailed,
    ObservationStart,
)
from omstream.schemas.jobs import ModelJob

from . import ids
from .prompting.observer_attachments import Capability, unknown_capability
from .prompting.window import window_tokens
from .rules import resource, thresholds
from .rules.extraction import Extraction
from .rules.resolution import ResolvedConfig, resolve
from .rules.tokens import Counter, count_messages, get_counter
from .state import Cycle, MemoryState

__all__ = ["EngineConfig", "Folded", "HookCall", "Rejected", "Step", "config_digest", "replace_fields"]


def config_digest(om: OmConfig) -> str:
    """A short content hash of the options: equal digests make equal decisions and requests."""
    body = orjson.dumps(om.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(body).hexdigest()[:16]


def replace_fields(state: MemoryState, changes: dict[str, object]) -> MemoryState:
    """`state.model_copy(update=changes)`, without its generic copying: a fold call replaces
    fields a dozen times, and pydantic's copy (three `copy.copy` calls each time) was a fifth of
    the fold's cost.  Like `model_copy`, it does not validate the new values."""
    new = object.__new__(MemoryState)
    object.__setattr__(new, "__dict__", {**state.__dict__, **changes})
    object.__setattr__(new, "__pydantic_fields_set__", state.__pydantic_fields_set__ | changes.keys())
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


@dataclass(frozen=True)
class EngineConfig:
    """The options, resolved once into the numbers the fold decides with.

    `version` is the memory version folding (its jobs carry it, and its results come back with
    it).  A version either *follows* the log (`settled=False`, the live version and a replay
    under the live configuration): it applies the results recorded under its own configuration
    digest wherever they sit in the log, exactly as a crash recovery refolds them.  Or it is
    *settled* (a replay under another configuration): every job it has in flight, background
    ones too, holds the memory's later inputs until its own result comes back, so what it
    decides never depends on how fast a model answered (the semantics of `om simulate`).

    `takes_attachments` answers whether a model takes images and files (what an "auto"
    `observeAttachments` asks); the edge that builds the config passes it (it may read a model
    table, such as litellm's, which the engine must not import).  Without it every model's
    capability is unknown, and an unknown model is forwarded attachments.
    """

    om: OmConfig
    version: str = "live"
    settled: bool = False
    takes_attachments: Capability = unknown_capability
    resolved: ResolvedConfig = field(init=False)
    counter: Counter = field(init=False)
    cycle_deadline: timedelta = field(init=False)  # parsed once: it is read for every held input
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "digest", config_digest(self.om))
        object.__setattr__(self, "resolved", resolve(self.om))
        object.__setattr__(self, "counter", get_counter(self.om.token_counter))
        object.__setattr__(self, "cycle_deadline", timedelta(milliseconds=self.om.cycle_deadline_ms))

    # The numbers of one memory: the arithmetic is `thresholds`'; these read its inputs.
    def base_message_tokens(self, state: MemoryState) -> int:
        o = self.resolved.observation
        return thresholds.base_message_tokens(state.message_tokens_override, o.message_tokens,
                                              buffer_tokens=o.buffer_tokens, buffer_activation=o.buffer_activation)

    def base_reflection_tokens(self, state: MemoryState) -> int:
        return thresholds.base_reflection_tokens(state.observation_tokens_override,
                                                 self.resolved.reflection.observation_tokens)

    def message_threshold(self, state: MemoryState) -> int:
        return thresholds.effective_message_threshold(
            self.base_message_tokens(state), self.base_reflection_tokens(state),
            state.observation_tokens, share_token_budget=self.resolved.share_token_budget)

    def reflection_threshold(self, state: MemoryState, pending_tokens: int) -> int:
        return thresholds.effective_reflection_threshold(
            self.base_message_tokens(state), self.base_reflection_tokens(state), pending_tokens,
            share_token_budget=self.resolved.share_token_budget)

    def retention_floor(self, state: MemoryState) -> float:
        return thresholds.retention_floor(self.resolved.observation.buffer_activation, self.message_threshold(state))

    def marker_config(self, state: MemoryState) -> MarkerConfig:
        idle = self.resolved.observation.activate_after_idle
        return MarkerConfig(
            message_tokens=self.base_message_tokens(state),
            observation_tokens=self.base_reflection_tokens(state),
            scope=self.om.scope,
            activate_after_idle=idle if isinstance(idle, int) else None,
        )


@dataclass(frozen=True)
class Rejected:
    """An input the fold refuses; the worker sends it to the dead-letter topic with the reason."""

    reason: str


@dataclass(frozen=True)
class HookCall:
    """A lifecycle hook to call (spec §13) once the fold call's outputs are sent: `name` is
    `onObservationStart`, `onObservationEnd`, `onReflectionStart` or `onReflectionEnd`, and
    `background` marks an async-buffer cycle's, which is never awaited."""

    name: str
    payload: dict[str, Any]
    background: bool = False


@dataclass(frozen=True)
class Folded:
    state: MemoryState
    events: tuple[EventEnvelope, ...] = ()
    jobs: tuple[ModelJob, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    hooks: tuple[HookCall, ...] = ()


#: Events that take a seq but no id of the memory's count (`ids`): they tell when inputs waited.
_NOTICES = (InputHeld, InputReleased)
_STARTS = (ObservationStart, BufferingStart)
_ENDS = (ObservationEnd, BufferingEnd, ObservationFailed, BufferingFailed)
_FAILURES = (ObservationFailed, BufferingFailed)


class Step:
    """Collects what one fold call emits; `state` is replaced, never mutated."""

    def __init__(self, state: MemoryState, config: EngineConfig) -> None:
        self.state = state
        self.config = config
        self.events: list[EventEnvelope] = []
        self.jobs: list[ModelJob] = []
        self.rejected: list[Rejected] = []
        # Set when this call changed the observations (a reflection check follows).
        self.observations_changed = False
        # A structured extractor follow-up's values, from its result to the commit it belongs to.
        self.structured: Extraction | None = None
        # Events that follow the step's `data-om-status` (see `emit_after_status`).
        self._after_status: list[tuple[type, object, datetime, Cycle | None]] = []
        # Lifecycle hook calls, one start and one end per cycle: (phase, cycle id) -> index in `hooks`.
        self.hooks: list[HookCall] = []
        self._hooked: dict[tuple[str, str], int] = {}

    def update(self, **changes: object) -> None:
        self.state = replace_fields(self.state, changes)

    def now(self, at: datetime) -> datetime:
        """Event time never goes backwards within a memory."""
        clock = self.state.clock
        now = at if clock is None or at > clock else clock
        self.update(clock=now)
        return now

    @property
    def thread_id(self) -> str:
        """The thread this step is about: the memory's, or in resource scope the thread of the
        input being folded (or whose check the cycle in flight holds)."""
        return self.state.focus or self.state.thread_id

    def emit(self, cls: type, data: object, at: datetime, *, thread_id: str | None = None,
             cycle: Cycle | None = None) -> None:
        """Emit an event; a cycle's start, end or failure names the `cycle`, for its hooks."""
        seq = self.state.seq + 1
        key = self.state.memory_key
        notice = cls in _NOTICES
        notices = self.state.notices + notice
        event_id = ids.notice_id(key, seq) if notice else ids.event_id(key, seq - notices)
        self.events.append(cls(
            event_id=event_id, memory_key=key, thread_id=thread_id or self.thread_id,
            seq=seq, event_time=at, data=data,
        ))
        self.update(seq=seq, notices=notices)
        if cycle is not None:
            self._hook(cls, data, cycle)

    def _hook(self, cls: type, data: Any, cycle: Cycle) -> None:
        """The lifecycle hook call a cycle's event makes: one start and one end per cycle,
        whatever the events (a resource memory's threads each have theirs; a ladder's later
        rungs start nothing).  The end's `error` is the first failure's."""
        if cls in _STARTS and cycle.ladder_of is None:
            phase = "Start"
        elif cls in _ENDS:
            phase = "End"
        else:
            return
        name = f"on{'Reflection' if data.operation_type == 'reflection' else 'Observation'}{phase}"
        error = data.error if cls in _FAILURES else None
        known = self._hooked.get((phase, cycle.hook_id))
        if known is not None:
            call = self.hooks[known]
            if error is not None and "error" not in call.payload:
                self.hooks[known] = replace(call, payload={**call.payload, "error": error})
            return
        payload: dict[str, Any] = {"threadId": self.thread_id}
        if self.state.resource_id:
            payload["resourceId"] = self.state.resource_id
        # omstream: the cycle's id (a ladder's first rung), the same on a call made again after
        # a crash, so a hook can count each cycle once.
        payload["trigger"], payload["cycleId"] = cycle.trigger, cycle.hook_id
        if phase == "End":
            if cycle.usage is not None:
                payload["usage"] = {"inputTokens": cycle.usage.input_tokens,
                                    "outputTokens": cycle.usage.output_tokens,
                                    "totalTokens": cycle.usage.total_tokens}
            if cycle.provider_metadata:
                payload["providerMetadata"] = cycle.provider_metadata
            if error is not None:
                payload["error"] = error
        self._hooked[(phase, cycle.hook_id)] = len(self.hooks)
        self.hooks.append(HookCall(name, payload, background=cycle.trigger == "async-buffer"))

    def emit_after_status(self, cls: type, data: object, at: datetime, *, cycle: Cycle | None = None) -> None:
        """Emit once the current step has reported its status (or when the fold call ends).

        A background buffer is started inside a step, so that step's status already shows it
        running, but it announces itself (`buffering-start`) only after that status: the
        original fires `buffer()` without awaiting it and the status goes out first, as its
        recordings show.
        """
        self._after_status.append((cls, data, at, cycle))

    def flush_after_status(self) -> None:
        pending, self._after_status = self._after_status, []
        for cls, data, at, cycle in pending:
            self.emit(cls, data, at, cycle=cycle)

    def next_cycle_id(self) -> str:
        """The id of the cycle whose start event comes next; events promised for after the
        status count too, so two cycles started in one step never share an id."""
        return ids.cycle_id(self.state.memory_key,
                            self.state.seq - self.state.notices + 1 + len(self._after_status))

    @property
    def record_id(self) -> str:
        return ids.record_id(self.state.memory_key, self.state.generation)

    @property
    def pending_tokens(self) -> int:
        """The unobserved tokens of the window the check measures (spec §6.1)."""
        if resource.is_resource(self.config):
            return window_tokens(self.state, self.state.focus, self.config)
        return count_messages([m.tokens for m in self.state.pending])

    def finish(self) -> Folded:
        self.flush_after_status()  # no status this call (a blocking cycle started, a turn ended)
        return Folded(self.state, tuple(self.events), tuple(self.jobs), tuple(self.rejected), tuple(self.hooks))
