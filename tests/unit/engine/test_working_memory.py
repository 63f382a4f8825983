"""The working-memory options (`workingMemory.enabled`, `agentManaged`, `useStateSignals`) and the
agent's write (`working-memory-set`) through the fold."""

from __future__ import annotations

import pytest

from omstream.engine.fold import fold, new_state
from omstream.engine.rules.resolution import resolve
from omstream.schemas.config import load_om_config
from omstream.schemas.control import WorkingMemorySet
from tests.helpers import T0, engine, message, scripted_result

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@pytest.mark.parametrize(("options", "expected"), [
    ({}, (False, False, False, "updateWorkingMemory")),
    ({"workingMemory": {"enabled": True}}, (True, True, False, "updateWorkingMemory")),
    # The Observer keeps it: not the agent's to write, shown as a state signal (1.31.0's defaults).
    ({"observation": {"manageWorkingMemory": True}}, (True, False, True, "setWorkingMemory")),
    ({"workingMemory": {"enabled": True}, "observation": {"manageWorkingMemory": True}},
     (True, False, True, "setWorkingMemory")),
    ({"workingMemory": {"enabled": True, "agentManaged": True, "useStateSignals": False},
      "observation": {"manageWorkingMemory": True}}, (True, True, False, "updateWorkingMemory")),
    ({"workingMemory": {"enabled": True, "useStateSignals": True}}, (True, True, True, "setWorkingMemory")),
    ({"workingMemory": {"enabled": False, "agentManaged": True}}, (False, False, False, "updateWorkingMemory")),
])
def test_the_options_resolve_as_the_original_defaults_them(options, expected):
    wm = resolve(load_om_config(options)).working_memory
    assert (wm.enabled, wm.agent_managed, wm.use_state_signals, wm.tool_name) == expected


def _write(options, value):
    config = engine(300, **options)
    out = fold(new_state("thread:t1", "t1", "u1"),
               WorkingMemorySet(thread_id="t1", at=T0, working_memory=value, request_id="w1"), config)
    return out


def test_the_agent_replaces_the_document_and_an_event_says_so():
    out = _write({"workingMemory": {"enabled": True}}, "# User\n- **First Name**: Ada")
    assert out.rejected == ()
    assert out.state.working_memory == "# User\n- **First Name**: Ada"
    [event] = out.events
    assert event.type == "om-working-memory-updated"
    assert (event.data.working_memory, event.data.request_id) == ("# User\n- **First Name**: Ada", "w1")


@pytest.mark.parametrize(("options", "value", "reason"), [
    ({}, "x", "workingMemory.enabled is false"),
    ({"observation": {"manageWorkingMemory": True}}, "x", "workingMemory.agentManaged is false"),
    ({"workingMemory": {"enabled": True}}, {"name": "Ada"}, "markdown text"),
    ({"workingMemory": {"enabled": True, "schema": SCHEMA}}, "x", "a JSON object"),
    ({"workingMemory": {"enabled": True, "schema": SCHEMA}}, {"age": 3}, "'name' is a required property"),
])
def test_a_write_the_configuration_does_not_allow_is_refused_with_the_reason(options, value, reason):
    out = _write(options, value)
    [refused] = out.rejected
    assert reason in refused.reason and "working-memory-set for thread:t1" in refused.reason
    assert out.events == () and out.state.working_memory is None


def test_a_document_of_the_schema_is_kept_as_the_object():
    out = _write({"workingMemory": {"enabled": True, "schema": SCHEMA}}, {"name": "Ada"})
    assert out.rejected == () and out.state.working_memory == {"name": "Ada"}


def test_the_observer_reads_what_the_agent_wrote():
    """Both may write it: the agent's document is the Observer's `current working memory`."""
    config = engine(300, observation={"manageWorkingMemory": True},
                    workingMemory={"enabled": True, "agentManaged": True})
    state = new_state("thread:t1", "t1", "u1")
    state = fold(state, WorkingMemorySet(thread_id="t1", at=T0, working_memory="# User\n- Lives in Lyon"),
                 config).state
    jobs = []
    for i in range(20):
        out = fold(state, message(i), config)
        state, jobs = out.state, out.jobs
        if jobs:
            break
    [job] = jobs
    assert "- Lives in Lyon" in job.messages[0].content + job.messages[1].content
    assert fold(state, scripted_result(job), config).rejected == ()
