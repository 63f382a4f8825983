"""How the context shows the working-memory document: the agent's tool instructions, read-only, or
a state signal whose cache key changes only with the document (`projections/views/working_memory.py`)."""

from __future__ import annotations

from omstream.engine.fold import fold, new_state
from omstream.projections.views.context import ContextProjection
from omstream.projections.views.working_memory import WorkingMemoryRendering
from omstream.schemas.config import load_om_config
from omstream.schemas.control import WorkingMemorySet
from tests.helpers import T0, engine, message

DOC = "# User Information\n- **First Name**: Ada"


def _context(options, writes=(DOC,), thread="t1", resource_scope=False):
    """The context answer of `thread` after a message and the agent's `writes`."""
    config = engine(100_000, **options)
    projection = ContextProjection(working_memory=WorkingMemoryRendering.of(config.om))
    key = "resource:u1" if resource_scope else "thread:t1"
    state = new_state(key, "t1", "u1")
    inputs = [message(0), *(WorkingMemorySet(thread_id="t1", resource_id="u1", at=T0, working_memory=w)
                            for w in writes)]
    if resource_scope:
        inputs.append(message(1, thread="t2"))
    for item in inputs:
        out = fold(state, item, config)
        assert out.rejected == ()
        state = out.state
        for event in out.events:
            projection.apply_event(event)
    return projection.snapshot(thread)


def test_an_agent_managed_document_comes_with_its_tool_from_the_first_message():
    answer = _context({"workingMemory": {"enabled": True}})
    [system] = [m["content"] for m in answer["chat"] if m["role"] == "system"]
    assert "`updateWorkingMemory` tool" in system and DOC in system and "Template:" in system
    assert answer["workingMemory"] == DOC and answer["stateSignals"] == []


def test_a_document_kept_for_the_agent_is_read_only():
    answer = _context({"workingMemory": {"enabled": True, "agentManaged": False, "useStateSignals": False}}, writes=())
    [system] = [m["content"] for m in answer["chat"] if m["role"] == "system"]
    assert "do not try to change it" in system and "Current working memory:\n(empty)" in system
    assert "Tool" not in system and "tool" not in system


def test_as_a_state_signal_the_document_leaves_the_system_messages():
    options = {"workingMemory": {"enabled": True, "useStateSignals": True}}
    answer = _context(options)
    assert not any(DOC in m["content"] for m in answer["chat"] if m["role"] == "system")
    [signal] = answer["stateSignals"]
    assert signal["id"] == "working-memory" and DOC in signal["content"]
    assert "`setWorkingMemory` tool" in signal["content"]
    assert {"role": "user", "content": signal["content"]} in answer["chat"]
    # The cache key changes with the document, and only with it.
    same = _context(options, writes=("draft", DOC))["stateSignals"][0]
    other = _context(options, writes=(DOC, DOC + "\n- **Location**: Lyon"))["stateSignals"][0]
    assert same["cacheKey"] == signal["cacheKey"] != other["cacheKey"]


def test_without_working_memory_nothing_is_shown():
    answer = _context({}, writes=())
    assert answer["stateSignals"] == [] and answer["workingMemory"] is None
    assert not any("WORKING MEMORY" in m["content"] for m in answer["chat"])
    assert WorkingMemoryRendering.of(load_om_config({})) is None


def test_in_resource_scope_every_thread_shows_the_resources_document():
    answer = _context({"scope": "resource", "workingMemory": {"enabled": True}}, thread="t2", resource_scope=True)
    assert answer["workingMemory"] == DOC
    assert any(DOC in m["content"] for m in answer["chat"] if m["role"] == "system")
