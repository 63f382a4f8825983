"""The observation-time rule in the fold: an Observer's invented time is corrected before the
observations are committed, and counted in the cycle's end event (`timesCorrected`)."""

from __future__ import annotations

import re

from omstream.engine.fold import fold
from omstream.schemas.jobs import ModelJob, ModelResult
from tests.helpers import engine, fold_inputs, message, scripted_result
from tests.unit.engine.resource_helpers import Memory, resource_engine, say
from tests.unit.engine.test_fold_async import buffered_loop, step

_TIME = re.compile(r"^(\* \S+ )\((\d{2}:\d{2})\)", re.MULTILINE)


def invented(job: ModelJob) -> ModelResult:
    """The scripted Observer's answer with its first observation of each section said at 23:59."""
    answer = scripted_result(job).output or ""
    sections = answer.split("<thread id=")
    return scripted_result(job, output="<thread id=".join(_TIME.sub(r"\1(23:59)", s, count=1) for s in sections))


def test_an_invented_time_is_corrected_and_counted_in_the_observation_end():
    config = engine(500)
    state, _, jobs, _ = fold_inputs([message(i) for i in range(6)], config)  # 09:00:00 to 09:02:30
    out = fold(state, invented(jobs[0]), config)
    [end] = [e for e in out.events if e.type == "data-om-observation-end"]
    assert "(23:59)" not in out.state.observations
    assert out.state.observations.startswith("Date: Mar 3, 2025\n* 🔴 (09:02) User said: [0]")
    assert end.data.observations == out.state.observations and end.data.times_corrected == 1
    assert end.data.wire()["timesCorrected"] == 1


def test_an_answer_within_its_messages_leaves_the_end_event_without_the_field():
    config = engine(500)
    state, _, jobs, _ = fold_inputs([message(i) for i in range(6)], config)
    out = fold(state, scripted_result(jobs[0]), config)
    [end] = [e for e in out.events if e.type == "data-om-observation-end"]
    assert end.data.times_corrected is None and "timesCorrected" not in end.data.wire()


def test_a_buffered_chunk_is_corrected_before_it_is_filed_and_counted_in_the_buffering_end():
    loop = buffered_loop()
    ends = [e for e in loop.events if e.type == "data-om-buffering-end"]
    assert ends and all("timesCorrected" not in e.data.wire() for e in ends)
    before = len(loop.events)
    loop(message(4, words=40))
    loop(step(0, message(4).created_at, after="t1-m4"))
    while loop.queue:
        loop(invented(loop.queue.pop(0)))
    [end] = [e for e in loop.events[before:] if e.type == "data-om-buffering-end"]
    assert end.data.times_corrected == 1 and "(23:59)" not in end.data.observations
    assert loop.state.chunks[-1].observations == end.data.observations


def test_each_thread_of_a_resource_observation_is_held_to_its_own_messages():
    memory = Memory(resource_engine(400, obscureThreadIds=False))
    n = 0
    while not memory.waiting:
        memory.feed(say(n, "conv-1" if n % 3 else "conv-2"))
        n += 1
    memory.feed(invented(memory.waiting.pop(0)))
    ends = memory.of_type("data-om-observation-end")
    assert [e.data.times_corrected for e in ends] == [1, 1]
    assert "(23:59)" not in memory.state.observations
