"""Read models for the recall tests: messages folded by the engine, their events applied to a
projection, as `om serve` builds it."""

from datetime import UTC, datetime, timedelta

from omstream.engine.fold import fold, new_state
from omstream.engine.tokens import get_counter
from omstream.projections.context import ContextProjection
from omstream.projections.recall import Caller, RecallSource, parse_params, recall
from omstream.schemas.messages import Message
from tests.helpers import engine

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
