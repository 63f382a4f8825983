"""Forgetting one thread of a resource in the read side's history (issue 43 item 7).

A resource memory's reflections and deletions are memory-wide events: their text is the whole
log, every thread's `<thread id>` sections.  Once a thread is deleted, no point of the history
(`since`, the feed's replay; `context_as_of`, time travel and the dashboard's generations) may
show a word of it, in memory or in the read model's store, while the other threads' history
stays whole."""

from __future__ import annotations

import re

import pytest

from omstream.engine.prompting.sections import shown_thread_id
from omstream.projections.store.store import ReadModelStore
from omstream.projections.store.stored_history import StoredHistory
from omstream.projections.views.asof import context_as_of
from omstream.projections.views.history import EventHistory
from omstream.projections.views.resource_views import ResourceRendering, without_thread_text
from omstream.schemas.codec import encode
from omstream.schemas.control import ThreadDeleted
from tests.helpers import T0
from tests.unit.engine.resource_helpers import Memory, resource_engine, say

A, B = "conv-1", "conv-2"
KEY = "resource:u1"


def _tags(thread: str, text: str) -> set[str]:
    """The marks of `thread`'s messages (`R1T<thread's last digit>N<n>`) found in `text`."""
    return set(re.findall(rf"R1T{thread[-1]}N\d{{4}}", text))


def _reflected_then_deleted(obscure: bool) -> list:
    """Two threads observed and reflected (reflections keep the sections), then A deleted."""
    memory = Memory(resource_engine(300, obscureThreadIds=obscure, reflection={"observationTokens": 400}))
    n = 0
    while len(memory.of_type("data-om-observation-end")) < 8 or not [
            e for e in memory.of_type("data-om-observation-end") if e.data.operation_type == "reflection"]:
        memory.feed(say(n, (A, B)[n % 2]))
        memory.answer_all()
        n += 1
    memory.feed(ThreadDeleted(thread_id=A, at=T0, request_id="del-1"))
    return memory.events


@pytest.mark.parametrize("obscure", [False, True])
@pytest.mark.parametrize("kind", ["memory", "store"])
def test_no_point_of_the_history_shows_a_deleted_thread(tmp_path, obscure, kind):
    events = _reflected_then_deleted(obscure)
    history = EventHistory() if kind == "memory" else StoredHistory(ReadModelStore(tmp_path / "rm.sqlite"))
    deletion = next(e for e in events if e.type == "om-memory-deleted")
    reflections = [e for e in events if e.type == "data-om-observation-end" and e.data.operation_type == "reflection"]
    # Without the cut, the reflections' text would carry A's words into B's history.
    assert reflections and all(_tags(A, e.data.observations) for e in reflections)
    for event in events:
        history.append(event, raw=encode(event))

    kept = history.since(KEY, 0)
    assert not any(_tags(A, entry.frame) for entry in kept)
    assert not any(entry.event.thread_id == A for entry in kept)
    assert any(_tags(B, entry.frame) for entry in kept)  # B's history stays
    rendering = ResourceRendering(obscure_thread_ids=obscure)
    shown_b = shown_thread_id(B, obscure)
    for seq in range(1, deletion.seq + 1):
        past = context_as_of(history, KEY, B, seq, resource=rendering)
        assert past is not None
        assert not _tags(A, str(past)), seq
    last_reflection = context_as_of(history, KEY, B, reflections[-1].seq, resource=rendering)
    assert f'<thread id="{shown_b}">' in last_reflection["observations"]
    assert _tags(B, last_reflection["observations"])


def test_the_cut_leaves_documents_without_the_thread_as_they_are():
    document = {"type": "x", "data": {"observations": '<thread id="b">\nDate: Mar 3, 2025\n* y\n</thread>',
                                      "list": ["plain", 3], "n": None}}
    assert without_thread_text(document, "a") is document
    cut = without_thread_text({"data": {"observations": '<thread id="a">\nDate: Mar 3, 2025\n* x\n</thread>\n\n'
                                                         "--- message boundary (t1) ---\n\n" + document["data"]["observations"]}}, "a")
    assert cut == {"data": {"observations": document["data"]["observations"]}}
    obscured = shown_thread_id("a", True)
    assert without_thread_text([f'<thread id="{obscured}">\n* x\n</thread>'], "a") == [""]
