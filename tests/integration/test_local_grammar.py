"""The real local model (`local/qwen2.5-1.5b`, llama.cpp in this process) under the answer's
grammar: asked for a shape the grammar forbids (prose, 12-hour times, no tags), it still answers
an `<observations>` block the parser reads as clean, with only the messages' own date and times.
Without the grammar the same request gets the prose it asked for.  The multi-thread and
Reflector grammars are accepted by the server too (a grammar llama.cpp cannot parse fails the
call).  No broker: marked `integration` as the other real-model test is, for its minute of CPU.

The weights are installed here when missing (`om model install`, as `.ci/run` does first).
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime

import pytest

from omstream.engine.prompting import answer_grammar
from omstream.engine.prompting.parsing import parse_observer_output, parse_outcome
from omstream.models import local
from omstream.models.calls import RetryPolicy, run_job
from omstream.schemas.jobs import ChatMessage, ModelJob, ModelResult, request_hash

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TRANSCRIPT = """May 2 2026:
User (6:00 PM): I'm Dana. I adopted a greyhound called Pepper today; she is four.
Assistant: Congratulations! Greyhounds love soft beds.
User (6:06 PM): I also start a new job at the harbour office on Monday."""
# What the grammar forbids, asked for in so many words.
SYSTEM = ("You retell chats. Answer with one short paragraph of plain prose: no tags, no lists, no "
          "dates, and times in 12-hour form like 6:05 PM.")
USER = (f"## New Message History to Observe\n\n{TRANSCRIPT}\n\n---\n\n## Your Task\n\n"
        "Retell these messages in prose, with their times written like 6:05 PM.")
MESSAGES = (ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=USER))


def call(settings: dict, messages: tuple[ChatMessage, ...] = MESSAGES) -> ModelResult:
    job = ModelJob(kind="observe", cycle_id="grammar", memory_key="thread:t", thread_id="t", generation=0,
                   model=local.DEFAULT_MODEL, messages=messages, settings=settings,
                   request_hash=request_hash(local.DEFAULT_MODEL, messages, settings),
                   created_at=datetime.now(UTC))
    return asyncio.run(run_job(job, RetryPolicy(retries=0), timeout=600))


def test_the_grammar_keeps_the_local_model_to_the_contract():
    local.install()  # a no-op when installed
    grammar = answer_grammar.request_grammar(SYSTEM, USER, reflector=False, resource=False)
    assert grammar is not None
    started = time.monotonic()
    result = call({"grammar": grammar, "maxOutputTokens": 150})
    seconds = time.monotonic() - started
    assert result.ok, result.error
    answer = result.output or ""
    print(f"\nconstrained answer in {seconds:.0f} s (model load included):\n{answer}")
    assert parse_outcome(answer) == "clean", parse_observer_output(answer).recovered
    assert re.findall(r"^Date: (.+)$", answer, re.MULTILINE) == ["May 2, 2026"]
    assert set(re.findall(r"^\* \S+ \((\d\d:\d\d)\)", answer, re.MULTILINE)) <= {"18:00", "18:06"}

    plain = call({"maxOutputTokens": 60})
    print(f"the same request without the grammar:\n{plain.output}")
    assert plain.ok and parse_outcome(plain.output or "") != "clean"


def test_the_server_accepts_the_multi_thread_and_reflector_grammars():
    local.install()
    grammars = {
        "multi-thread": answer_grammar.resource_observer_grammar(
            {"t-1": {"May 2, 2026": ("18:00",)}, "t-2": {"May 3, 2026": ("09:30",)}},
            hints=True, title=True, sections=("preferences",)),
        "reflector": answer_grammar.reflector_grammar(hints=True, sections=("preferences",),
                                                      dates=("May 2, 2026",), thread_ids=("t-1",)),
        "observer with every section": answer_grammar.observer_grammar(
            {"May 2, 2026": ("18:00", "18:06")}, hints=True, sections=("thread-title", "working-memory")),
    }
    for name, grammar in grammars.items():
        result = call({"grammar": grammar, "maxOutputTokens": 12})
        assert result.ok, (name, result.error)
        assert (result.output or "").startswith("<observations>"), (name, result.output)
