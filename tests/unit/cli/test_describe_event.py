"""`om tail` and the demo print one readable line per event, never the raw JSON."""

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
