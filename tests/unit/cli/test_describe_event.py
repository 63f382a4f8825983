"""`om tail` and the demo print one readable line per event, never the raw JSON."""

import re

from omstream.cli.tail import describe_event
from omstream.engine.fold import fold
from tests.helpers import engine, fold_inputs, message, scripted_result


def test_every_event_of_a_cycle_reads_as_a_sentence():
    config = engine(500)
    state, events, jobs, _ = fold_inputs([message(i) for i in range(6)], config)
    events = [*events, *fold(state, scripted_result(jobs[0]), config).events]
    lines = {e.type: describe_event(e) for e in reversed(events)}  # the first of each type
    assert {"om-message-accepted", "data-om-status", "data-om-observation-start",
            "data-om-observation-end"} <= set(lines)
    assert all("{" not in line for line in lines.values()), lines
    assert lines["om-message-accepted"].endswith("user message t1-m0, 68 tokens")


def test_holds_releases_and_the_agents_working_memory_read_as_sentences():
    from datetime import timedelta

    from omstream.schemas.control import WorkingMemorySet
    from tests.helpers import T0

    config = engine(300, workingMemory={"enabled": True})
    state, events, jobs, _ = fold_inputs([message(i) for i in range(8)], config)
    assert jobs, "a blocking observation is in flight: later inputs are held"
    queue = [message(8), WorkingMemorySet(thread_id="t1", at=T0 + timedelta(hours=1), working_memory="# U"),
             *map(scripted_result, jobs)]
    while queue:  # every job answered, the ones a release starts too
        out = fold(state, queue.pop(0), config)
        state, events = out.state, [*events, *out.events]
        queue += map(scripted_result, out.jobs)
    lines = {e.type: describe_event(e) for e in reversed(events)}
    assert re.search(r"holding 1 input \(message t1-m\d\) until cycle [0-9a-f]{8} ends$", lines["om-input-held"])
    held = max(e.data.held for e in events if e.type == "om-input-held")
    assert lines["om-input-released"].endswith(f"ended: {held} held inputs applied"), lines
    assert lines["om-working-memory-updated"].endswith("the agent wrote the working memory (3 characters)")
    assert all("{" not in line for line in lines.values()), lines
