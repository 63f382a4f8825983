"""`bench.quality`'s ingest: a LoCoMo conversation through omstream's real fold and model calls.

The loop is `omstream.conversations.simulation.simulate`'s (every job settled before the next input, results
stamped untimed so the same inputs decide the same), with one difference: each model job is
first looked up in the bench's call checkpoint (`quality_store.CallCache`, by request hash) and
every answer the model gives is written there as it returns, so a stopped ingest resumes with
the calls it already paid for.  No hooks are configured by the bench, so none are run.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .locomo import Conversation
from .quality_store import CallCache, CallLimit

__all__ = ["Ingested", "engine_sources", "ingest", "messages_of", "observer_outcome", "om_config",
           "session_tokens", "thread_id", "thresholds"]

COUNTER = "tiktoken"
MESSAGE_GAP = timedelta(minutes=1)


def thread_id(conversation: Conversation, index: int) -> str:
    return f"locomo-{conversation.sample_id or index}"


def messages_of(conversation: Conversation, thread: str) -> list[Any]:
    """The conversation as chat messages: every turn a `user` message `"<speaker>: <text>"`,
    a session's first at the session's date, the next ones `MESSAGE_GAP` apart (always after
    the previous message).  A message's id is `<thread>:<session>:<turn>` (1-based)."""
    from omstream.schemas.messages import Message

    messages: list[Message] = []
    last: datetime | None = None
    for session in conversation.sessions:
        for i, turn in enumerate(session.turns):
            at = session.at + i * MESSAGE_GAP
            if last is not None and at <= last:
                at = last + timedelta(seconds=1)
            last = at
            messages.append(Message(id=f"{thread}:{session.number}:{i + 1}", thread_id=thread, role="user",
                                    content=f"{turn.speaker}: {turn.content()}", created_at=at))
    return messages


def session_tokens(conversation: Conversation, messages: Sequence[Any], counter: Any) -> list[int]:
    """Tokens per session as the fold counts them (the project's counter and overheads)."""
    from omstream.engine.rules.tokens import count_message

    counts = [count_message(m, counter) for m in messages]
    out, start = [], 0
    for session in conversation.sessions:
        out.append(sum(counts[start:start + len(session.turns)]))
        start += len(session.turns)
    return out


def thresholds(per_session: Sequence[int]) -> tuple[int, int]:
    """(messageTokens, observationTokens) scaled to a conversation: two mean sessions, and
    8 % of the whole, each rounded up to 100 and at least 500.  The local model wrote about
    7.5 observation tokens per 100 message tokens on conversation 0's first sessions, so the
    log reaches 8 % of the conversation late in it: one reflection, two if the Observer is
    wordier."""
    total = sum(per_session)
    mean = total / max(1, len(per_session))
    message_tokens = max(500, math.ceil(2 * mean / 100) * 100)
    observation_tokens = max(500, math.ceil(0.08 * total / 100) * 100)
    return message_tokens, observation_tokens


def om_config(observer: str, reflector: str, message_tokens: int, observation_tokens: int,
              instruction: str | None) -> Any:
    from omstream.schemas.config import load_om_config

    observation: dict[str, Any] = {"model": observer, "messageTokens": message_tokens, "bufferTokens": False}
    reflection: dict[str, Any] = {"model": reflector, "observationTokens": observation_tokens}
    if instruction:
        observation["instruction"] = reflection["instruction"] = instruction
    return load_om_config({"tokenCounter": COUNTER, "timeZone": "UTC",
                           "observation": observation, "reflection": reflection})


def engine_sources() -> list[Path]:
    """The code an ingest's outcome depends on besides its inputs: the engine (fold, prompts,
    parsers), the read side's window and the simulation loop.  A change there gives the
    ingest a new checkpoint key; the model calls it still makes the same are served from
    the call checkpoint."""
    import omstream
    from omstream.projections.views import context

    root = Path(omstream.__file__).parent
    # Every room of the engine (rglob): a change in prompting/ or rules/ is a change of the ingest.
    return [*sorted((root / "engine").rglob("*.py")), root / "conversations" / "simulation.py", Path(context.__file__)]


def observer_outcome(result: Any) -> str:
    """`clean`, `recovered` or `failed` for one Observer result (`parsing.parse_outcome`)."""
    from omstream.engine.prompting.parsing import parse_outcome

    return parse_outcome(result.output) if result.ok and result.output else "failed"


@dataclass
class Ingested:
    chat: list[dict[str, Any]]     # the agent's context window, chat messages
    observations: str              # the observation log (as stored)
    observation_tokens: int        # counted with the project's counter
    raw_messages: int              # messages of the window not yet observed
    raw_ids: list[str]             # their ids
    observer_calls: int
    reflector_calls: int
    outcomes: dict[str, int]
    generation: int
    events: dict[str, int]
    rejected: list[str]
    calls: list[dict[str, Any]]    # per model call: kind, seconds (measured when made), tokens, cached

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ingested:
        return cls(**data)


def _call_row(result: Any, cached: bool) -> dict[str, Any]:
    usage = result.usage
    return {"kind": result.kind, "ok": result.ok, "attempts": result.attempts, "cached": cached,
            "seconds": round((result.completed_at - result.started_at).total_seconds(), 1),
            "inputTokens": usage.input_tokens if usage else None,
            "outputTokens": usage.output_tokens if usage else None}


async def _run(job: Any, cache: CallCache, limit: CallLimit, timeout: float) -> tuple[Any, dict[str, Any]]:
    """The job's result: from the call checkpoint, or from the model (then checkpointed)."""
    from omstream.models.calls import RetryPolicy, run_job

    # Whether the call was made under the answer's grammar (a local model's Observer and
    # Reflector calls are): the report reads the parse shares by it.
    grammar = {"grammar": bool(job.settings.get("grammar"))}
    stored = cache.original(job.request_hash)
    if stored is not None:
        cached = cache.get(job)
        return cached, {**_call_row(stored, True), "kind": job.kind, **grammar}
    limit.before("ingest")
    result = await run_job(job, RetryPolicy(), timeout=timeout)
    limit.count("ingest")
    cache.put(result, job)
    return result, {**_call_row(result, False), **grammar}


async def ingest(thread: str, om: Any, messages: list[Any], cache: CallCache, limit: CallLimit, *,
                 timeout: float = 1800.0, events: list[Any] | None = None,
                 on_call: Callable[[Any, Any], None] | None = None) -> Ingested:
    """Fold the messages with real (or checkpointed) model calls, then build the agent's
    context window from the fold's events, as the read side does.

    `events`, when given, receives the fold's events (what the read side would consume: the
    recall condition feeds its own projection with them); `on_call(job, result)` sees every
    model job with its result, as it is answered (the corpus export reads the prompts there:
    the call checkpoint keeps only the answers)."""
    from omstream.conversations.simulation import Simulation, driven_config, inputs_of
    from omstream.engine.fold import EngineConfig
    from omstream.engine.rules.tokens import get_counter
    from omstream.models.calls import untimed
    from omstream.models.capabilities import takes_attachments
    from omstream.projections.views.context import ContextProjection, context_messages
    from omstream.schemas.messages import Message

    sim = Simulation(EngineConfig(driven_config(om), takes_attachments=takes_attachments))
    calls: list[dict[str, Any]] = []
    outcomes = Counter({"clean": 0, "recovered": 0, "failed": 0})
    # Every message drawn (mininterval 0): the bar then shows the message that waits on a model call.
    with tqdm(total=len(messages), unit="msg", desc="ingest", file=sys.stderr, mininterval=0) as bar:
        for event in inputs_of(messages):
            jobs = sim.feed(event)
            while jobs:
                job = jobs.pop(0)
                result, row = await _run(job, cache, limit, timeout)
                if on_call is not None:
                    on_call(job, result)
                sim.results.append(result)
                calls.append(row)
                if job.kind in ("observe", "buffer"):
                    outcomes[observer_outcome(result)] += 1
                jobs.extend(sim.feed(untimed(result, job)))
                bar.set_postfix_str(f"{len(calls)} model calls", refresh=False)
            if isinstance(event, Message):
                bar.update()
    if events is not None:
        events.extend(sim.events)
    projection = ContextProjection(time_zone=om.time_zone)
    for e in sim.events:
        projection.apply_event(e)
    view = projection.view(thread)
    kinds = Counter(job.kind for job in sim.jobs)
    counter = get_counter(om.token_counter)
    state = next(iter(sim.states.values()), None)
    raw = view.unobserved()
    return Ingested(
        chat=context_messages(view), observations=view.observations,
        observation_tokens=counter.count(view.observations) if view.observations else 0,
        raw_messages=len(raw), raw_ids=[m.id for m in raw],
        observer_calls=kinds["observe"] + kinds["buffer"],
        reflector_calls=kinds["reflect"] + kinds["buffer-reflection"],
        outcomes=dict(outcomes), generation=state.generation if state is not None else 0,
        events=dict(sorted(Counter(e.type for e in sim.events).items())), rejected=list(sim.rejected),
        calls=calls)
