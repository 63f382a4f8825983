"""The model job a cycle sends, when its outcome happened, and the marker of a failed cycle.

A job carries everything the model agent needs and nothing it must look up: the model chosen for
the input's size (`ModelByInputTokens`), its fallbacks, settings and provider options, and a
request hash over all of them, so an answer cached for one request is never reused for another.

An Observer or Reflector job for a local model (`local/<name>`, llama.cpp) also carries the
grammar of the answer its prompt asks for (`answer_grammar`) in `settings["grammar"]`: the model
then cannot write an answer the parser would have to repair.  A hosted model's job is unchanged.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from omstream.schemas.base import iso
from omstream.schemas.config.models import ModelWithRetries, model_name
from omstream.schemas.events import (
    BufferingFailed,
    BufferingFailedData,
    ObservationFailed,
    ObservationFailedData,
    OperationType,
)
from omstream.schemas.jobs import (
    ChatMessage,
    JobKind,
    JobTrigger,
    ModelCall,
    ModelJob,
    ModelResult,
    TextContent,
    request_hash,
)

from ..prompting import answer_grammar
from ..rules.resolution import is_local
from ..state import Cycle
from ..step import Step

__all__ = ["failed", "failure", "model_calls", "model_job", "outcome_time"]


def model_job(step: Step, cycle: Cycle, messages: tuple[ChatMessage, ...], *, reflector: bool,
              trigger: JobTrigger, input_tokens: int, kind: JobKind | None = None,
              extra_settings: dict[str, Any] | None = None) -> ModelJob | str:
    """The job for `cycle`, or the error text when no model may take it (ModelByInputTokens)."""
    state, resolved = step.state, step.config.resolved
    agent = resolved.reflection.model if reflector else resolved.observation.model
    try:
        model = agent.for_input_tokens(input_tokens)
    except ValueError as exc:
        return str(exc)
    fallbacks, models = None, None
    if agent.routing == "fallbacks" and isinstance(agent.spec, tuple):
        models = model_calls(agent.spec)
        if models:
            model = models[0].model
        else:
            fallbacks = tuple(e.model for e in agent.spec[1:] if e.enabled) or None
    settings = _with_grammar(step, kind or cycle.kind, model, messages, reflector,
                             {**agent.settings, **(extra_settings or {})})
    options = agent.provider_options or None
    # An observer request asked again because its answer looped wants another answer.
    sample = 0 if reflector else cycle.level
    config = step.config
    return ModelJob(
        kind=kind or cycle.kind, cycle_id=cycle.cycle_id, memory_key=state.memory_key,
        thread_id=step.thread_id, generation=state.generation,
        cursor=iso(state.cursor) if state.cursor else None, model=model, messages=messages,
        settings=settings, provider_options=options, fallbacks=fallbacks, models=models,
        request_hash=request_hash(model, messages, settings, provider_options=options,
                                  fallbacks=fallbacks, sample=sample, models=models),
        created_at=cycle.started_at, trigger=trigger, input_tokens=input_tokens,
        sample=sample or None, version=config.version, config_digest=config.digest,
    )


#: What a `ModelWithRetries` entry may set besides its model (`enabled` only skips it).
_ENTRY_OPTIONS = frozenset({"id", "max_retries", "model_settings", "provider_options", "headers"})


def model_calls(entries: tuple[ModelWithRetries, ...]) -> tuple[ModelCall, ...] | None:
    """A fallback list's enabled entries, each with its own options, when any entry sets one;
    None otherwise (the job names the models alone, and hashes as it always did)."""
    if not any(e.model_fields_set & _ENTRY_OPTIONS for e in entries):
        return None
    return tuple(ModelCall(model=model_name(e.model), id=e.id, max_retries=e.max_retries,
                           settings=dict(e.model_settings), provider_options=e.provider_options,
                           headers=dict(e.headers))
                 for e in entries if e.enabled)


#: Jobs whose answer is an Observer's or a Reflector's text.  A structured follow-up (`extract`)
#: sends `response_format`, which llama.cpp turns into a grammar by itself.
GRAMMAR_KINDS: frozenset[str] = frozenset({"observe", "buffer", "reflect", "buffer-reflection"})


def _text(message: ChatMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "\n".join(part.text for part in message.content if isinstance(part, TextContent))


def _with_grammar(step: Step, kind: str, model: str, messages: tuple[ChatMessage, ...], reflector: bool,
                  settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` with the answer's grammar, for an Observer or Reflector job of a local model.

    A `grammar` the user set in the agent's `modelSettings` wins (an empty one turns constrained
    decoding off: the models layer sends no empty grammar); so does one a caller passed."""
    if not is_local(model) or kind not in GRAMMAR_KINDS or "grammar" in settings:
        return settings
    system = "\n".join(_text(m) for m in messages if m.role == "system")
    user = "\n".join(_text(m) for m in messages if m.role == "user")
    grammar = answer_grammar.request_grammar(system, user, reflector=reflector,
                                             resource=step.config.resolved.scope == "resource")
    return {**settings, "grammar": grammar} if grammar else settings


def outcome_time(step: Step, cycle: Cycle, result: ModelResult) -> tuple[datetime, int]:
    """The cycle's start plus the model call's own duration, so the log does not depend on
    when the worker happened to read the result."""
    duration = max(0, round((result.completed_at - result.started_at).total_seconds() * 1000))
    return step.now(cycle.started_at + timedelta(milliseconds=duration)), duration


def failure(step: Step, cycle: Cycle, operation: OperationType, error: str, done: datetime,
            duration: int, *, background: bool) -> BufferingFailedData | ObservationFailedData:
    """The failure marker's data: a background cycle's is a buffering failure."""
    data = BufferingFailedData if background else ObservationFailedData
    return data(
        cycle_id=cycle.cycle_id, operation_type=operation, failed_at=done, duration_ms=duration,
        tokens_attempted=cycle.tokens, error=error[:2000], record_id=step.record_id,
        thread_id=step.thread_id,
    )


def failed(step: Step, cycle: Cycle, operation: OperationType, error: str, done: datetime,
           duration: int, *, background: bool = False, rung: bool = False) -> None:
    """Emit the failure marker of `cycle` now.  A reflection ladder's `rung` that is retried
    fails on the log, but not to the lifecycle hooks: the cycle goes on with the next rung."""
    cls = BufferingFailed if background else ObservationFailed
    step.emit(cls, failure(step, cycle, operation, error, done, duration, background=background), done,
              cycle=None if rung else cycle)
