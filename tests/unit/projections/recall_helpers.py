"""Read models for the recall tests: messages folded by the engine, their events applied to a
projection, as `om serve` builds it."""

from datetime import UTC, datetime, timedelta

from omstream.engine.fold import fold, new_state
from omstream.engine.rules.tokens import get_counter
from omstream.engine.state import MemoryState
from omstream.projections.recall import Caller, RecallSource, parse_params, recall
from omstream.projections.views.context import ContextProjection
from omstream.schemas.messages import Message
from tests.helpers import engine, scripted_result

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
#: No observation ever: recall reads messages, and a 1M-token threshold keeps every job away.
QUIET = engine(1_000_000)


def msg(thread: str, n: int, content, *, role: str | None = None, resource: str | None = "u1",
        minutes: float | None = None) -> Message:
    return Message(id=f"{thread}-m{n:03d}", thread_id=thread, resource_id=resource,
                   role=role or ("user" if n % 2 == 0 else "assistant"), content=content,
                   created_at=T0 + timedelta(minutes=n if minutes is None else minutes))


def project(messages: list[Message], extra=(), projection: ContextProjection | None = None,
            config=QUIET) -> tuple[ContextProjection, list]:
    """Each message folded into its thread's memory and the events applied; `extra` inputs
    (thread, input) folded after them.  Returns the projection and every event in order."""
    projection = projection or ContextProjection()
    states, events = {}, []
    for thread, item in [(m.thread_id, m) for m in messages] + list(extra):
        resource = next((m.resource_id for m in messages if m.thread_id == thread), None)
        state = states.get(thread) or new_state(f"thread:{thread}", thread, resource)
        out = fold(state, item, config)
        states[thread] = out.state
        for event in out.events:
            projection.apply_event(event)
            events.append(event)
    return projection, events


def source_of(projection: ContextProjection, counter: str = "tokenx") -> RecallSource:
    return RecallSource(projection, get_counter(counter))


async def ask(source: RecallSource, thread: str = "t1", *, scope: str = "resource", resource: str | None = "u1",
              search=None, **params):
    return await recall(source, Caller(thread, resource, f"thread:{thread}", scope), parse_params(params), search)


def project_resources(messages: list[Message], config, projection: ContextProjection) -> dict[str, MemoryState]:
    """Each message folded into its resource's memory (`resource:<id>`, scope resource), every
    model job answered by the scripted models at once, the events applied to `projection`.
    Returns each resource's memory state."""
    states: dict[str, MemoryState] = {}
    for message in messages:
        resource = message.resource_id or ""
        state = states.get(resource) or new_state(f"resource:{resource}", message.thread_id, resource)
        queue: list = [message]
        while queue:
            out = fold(state, queue.pop(0), config)
            state = out.state
            for event in out.events:
                projection.apply_event(event)
            queue += [scripted_result(job) for job in out.jobs]
        states[resource] = state
    return states


def resource_caller(projection: ContextProjection, thread: str, scope: str = "resource") -> Caller:
    """The caller `om serve`'s recall route makes for `thread` (its view's resource and memory)."""
    view = projection.threads[thread]
    return Caller(thread, view.resource_id, view.memory_key or f"thread:{thread}", scope)
