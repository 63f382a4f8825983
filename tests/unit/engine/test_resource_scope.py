"""Resource scope in the fold (spec §6.10): one memory for all of a user's threads."""

from __future__ import annotations

import re

import xxhash

from omstream.engine.prompting.sections import merge_section, shown_thread_id
from omstream.engine.prompting.window import other_conversations, window_tokens
from omstream.engine.rules.resource import plan_batches
from omstream.schemas.control import ObserveRequested
from tests.helpers import T0
from tests.unit.engine.resource_helpers import Memory, observed_ids, resource_engine, say, tag

A, B, C, D = "conv-1", "conv-2", "conv-3", "conv-4"
_THREAD_TAG = re.compile(r'<thread id="([^"]*)">')


def test_messages_of_every_thread_fold_into_the_resource_memory():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False))
    for n in range(4):
        memory.feed(say(n, A if n % 2 else B))
    assert memory.state.memory_key == "resource:u1"
    assert [m.thread_id for m in memory.state.pending] == [B, A, B, A]
    accepted = memory.of_type("om-message-accepted")
    assert [e.thread_id for e in accepted] == [B, A, B, A]
    statuses = memory.of_type("data-om-status")
    assert [s.data.thread_id for s in statuses] == [B, A, B, A]


def test_a_threads_window_counts_the_other_threads_unobserved_messages():
    config = resource_engine(100_000, obscureThreadIds=False)
    memory = Memory(config)
    for n in range(5):
        memory.feed(say(n, A if n < 3 else B))
    state = memory.state
    others = other_conversations(state, B, config)
    assert others.startswith(f'<other-conversation id="{A}">\nMar 3 2025:\n')
    assert others.endswith("</other-conversation>")
    assert all(tag("u1", A, n) in others for n in range(3))
    assert tag("u1", B, 3) not in others and tag("u1", B, 4) not in others
    assert other_conversations(state, A, config).count("<other-conversation") == 1
    own = sum(m.tokens for m in state.pending if m.thread_id == B)
    expected = 24 + own + config.counter.count(others)
    assert window_tokens(state, B, config) == expected
    # The status of B's last message reports that window.
    assert memory.of_type("data-om-status")[-1].data.windows.active.messages.tokens == expected


def test_other_conversation_parts_are_cut_at_500_characters():
    config = resource_engine(100_000, obscureThreadIds=False)
    memory = Memory(config)
    memory.feed(say(0, A, words=200))
    memory.feed(say(1, B))
    block = other_conversations(memory.state, B, config)
    body = block.split("\n")[2]
    assert len(body.split(": ", 1)[1]) == 500
    assert re.search(r"\n\.\.\. \[truncated \d+ characters\]\n</other-conversation>$", block)


def test_one_observation_covers_the_threads_and_writes_a_section_each():
    memory = Memory(resource_engine(400, obscureThreadIds=False))
    n = 0
    while not memory.waiting:
        memory.feed(say(n, A if n % 3 else B))
        n += 1
    [job] = memory.waiting
    threads = _THREAD_TAG.findall(job.messages[1].content)
    assert threads == [B, A]  # ordered by their oldest message
    starts = memory.of_type("data-om-observation-start")
    assert [(s.thread_id, s.data.thread_ids) for s in starts] == [(B, (B, A)), (A, (B, A))]
    assert len({s.data.cycle_id for s in starts}) == 1
    memory.answer_all()
    ends = memory.of_type("data-om-observation-end")
    assert [e.thread_id for e in ends] == [B, A] and ends[0].data.cycle_id == starts[0].data.cycle_id
    assert sorted(observed_ids(memory)) == sorted(m.id for m in memory.sent)
    text = memory.state.observations
    assert _THREAD_TAG.findall(text) == [B, A]
    assert text.startswith(f'<thread id="{B}">\nDate: Mar 3, 2025\n')
    assert "--- message boundary (" in text  # the second thread's section follows a boundary
    newest = {t: max(m.created_at for m in memory.sent if m.thread_id == t) for t in (A, B)}
    assert {t: memory.state.threads[t].last_observed_at for t in (A, B)} == newest
    assert memory.state.cursor == max(newest.values())


def test_a_new_section_of_the_same_date_continues_the_threads_section():
    existing = '<thread id="a">\nDate: Mar 3, 2025\n* 🔴 (09:00) one\n</thread>'
    merged = merge_section(existing, "a", "Date: Mar 3, 2025\n* 🔴 (10:00) two", "2025-03-03T10:00:00.000Z")
    assert merged == '<thread id="a">\nDate: Mar 3, 2025\n* 🔴 (09:00) one\n* 🔴 (10:00) two\n</thread>'


def test_a_section_of_another_date_or_thread_follows_a_boundary():
    existing = '<thread id="a">\nDate: Mar 3, 2025\n* 🔴 (09:00) one\n</thread>'
    later = merge_section(existing, "a", "Date: Mar 4, 2025\n* 🔴 (08:00) two", "2025-03-04T08:00:00.000Z")
    assert later == (existing + "\n\n--- message boundary (2025-03-04T08:00:00.000Z) ---\n\n"
                     '<thread id="a">\nDate: Mar 4, 2025\n* 🔴 (08:00) two\n</thread>')
    other = merge_section(later, "b", "Date: Mar 3, 2025\n* 🔴 (09:30) three", "2025-03-03T09:30:00.000Z")
    assert other.endswith('--- message boundary (2025-03-03T09:30:00.000Z) ---\n\n'
                          '<thread id="b">\nDate: Mar 3, 2025\n* 🔴 (09:30) three\n</thread>')
    # The thread's latest section decides: Mar 3 is in the first one only, so it follows a boundary.
    again = merge_section(later, "a", "Date: Mar 3, 2025\n* 🔴 (23:00) four", "2025-03-03T23:00:00.000Z")
    assert again.endswith('<thread id="a">\nDate: Mar 3, 2025\n* 🔴 (23:00) four\n</thread>')


def test_a_second_observation_of_the_same_day_merges_into_the_threads_section():
    memory = Memory(resource_engine(300, obscureThreadIds=False))
    for n in range(40):
        memory.feed(say(n, A if n % 4 else B))
        memory.answer_all()
    assert len(memory.of_type("data-om-observation-start")) >= 4
    text = memory.state.observations
    # One section per thread on this one day: later observations merged into them.
    assert sorted(_THREAD_TAG.findall(text)) == [A, B]
    assert text.count("Date: Mar 3, 2025") == 2
    assert len(observed_ids(memory)) == len(set(observed_ids(memory)))


def test_obscured_thread_ids_are_xxhash32_in_8_hex_digits():
    assert shown_thread_id("conv-1", True) == xxhash.xxh32_hexdigest(b"conv-1", seed=0)
    assert re.fullmatch(r"[0-9a-f]{8}", shown_thread_id("a thread with a long id", True))
    assert shown_thread_id("conv-1", False) == "conv-1"


def test_obscure_thread_ids_is_on_by_default_in_resource_scope():
    memory = Memory(resource_engine(400))
    n = 0
    while not memory.waiting:
        memory.feed(say(n, A if n % 3 else B))
        n += 1
    prompt = memory.waiting[0].messages[1].content
    assert _THREAD_TAG.findall(prompt) == [shown_thread_id(B, True), shown_thread_id(A, True)]
    assert A not in prompt and B not in prompt
    memory.answer_all()
    assert _THREAD_TAG.findall(memory.state.observations) == [shown_thread_id(B, True), shown_thread_id(A, True)]


def _sized_state(sizes: dict[str, int]):
    """A memory holding `sizes[thread]` messages of each thread, oldest thread first."""
    memory = Memory(resource_engine(1_000_000, obscureThreadIds=False))
    n = 0
    for thread, count in sizes.items():
        for _ in range(count):
            memory.feed(say(n, thread))
            n += 1
    return memory


def test_batches_pick_the_largest_threads_until_the_threshold_in_order_of_age():
    memory = _sized_state({A: 1, B: 4, C: 2, D: 3})
    size = {t: 24 + sum(m.tokens for m in memory.state.pending if m.thread_id == t) for t in (A, B, C, D)}
    # B, then D reach the threshold: A and C wait.  In age order: B (older), D.
    threshold = size[B] + 1
    assert plan_batches(memory.state, threshold, 10_000) == ((B, D),)
    # A batch holds consecutive threads while it stays within the limit; a big one is alone.
    assert plan_batches(memory.state, threshold, size[B] + size[D] - 1) == ((B,), (D,))
    every = plan_batches(memory.state, 10**9, size[A] + size[B])
    assert every == ((A, B), (C, D)) if size[C] + size[D] <= size[A] + size[B] else ((A, B), (C,), (D,))
    assert plan_batches(memory.state, 10**9, 1) == ((A,), (B,), (C,), (D,))


def test_a_small_max_tokens_per_batch_sends_one_job_per_batch_and_commits_them_together():
    memory = Memory(resource_engine(100_000, obscureThreadIds=False,
                                    observation={"maxTokensPerBatch": 200}))
    for n in range(8):
        memory.feed(say(n, (A, B, C, D)[n % 4], words=60))
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    batches = [tuple(_THREAD_TAG.findall(j.messages[1].content)) for j in memory.waiting]
    assert batches == [(A,), (B,), (C,), (D,)]
    cycle = memory.state.in_flight
    assert [j.cycle_id for j in memory.waiting] == [f"{cycle.cycle_id}/{n}" for n in range(4)]
    # Answers in reverse: nothing is committed until the last one is in, then in batch order.
    for index in (3, 2, 1):
        memory.answer(index)
        assert memory.of_type("data-om-observation-end") == []
    memory.answer(0)
    assert [e.thread_id for e in memory.of_type("data-om-observation-end")] == [A, B, C, D]
    assert memory.state.pending == () and memory.state.in_flight is None


def test_a_failed_batch_leaves_its_threads_unobserved_and_the_others_commit():
    from tests.helpers import scripted_result

    memory = Memory(resource_engine(100_000, obscureThreadIds=False,
                                    observation={"maxTokensPerBatch": 200}))
    for n in range(4):
        memory.feed(say(n, (A, B)[n % 2], words=60))
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    first, second = memory.waiting
    memory.waiting.clear()
    memory.feed(scripted_result(first, ok=False, error="HTTP 500"))
    memory.feed(scripted_result(second))
    failed = memory.of_type("data-om-observation-failed")
    assert [(e.thread_id, e.data.error) for e in failed] == [(A, "HTTP 500")]
    assert [e.thread_id for e in memory.of_type("data-om-observation-end")] == [B]
    assert {m.thread_id for m in memory.state.pending} == {A}


def test_an_overdue_observation_fails_its_unanswered_batches_and_commits_the_others():
    from datetime import timedelta

    from tests.helpers import scripted_result

    memory = Memory(resource_engine(100_000, obscureThreadIds=False, cycleDeadline="1m",
                                    observation={"maxTokensPerBatch": 200}))
    for n in range(4):
        memory.feed(say(n, (A, B)[n % 2], words=60), log_time=T0)
    memory.feed(ObserveRequested(thread_id=A, at=T0), log_time=T0)
    first, second = memory.waiting
    memory.waiting.clear()
    memory.feed(scripted_result(second), log_time=T0 + timedelta(seconds=10))
    assert memory.of_type("data-om-observation-end") == []  # waits for the other batch
    memory.feed(say(4, A), log_time=T0 + timedelta(minutes=2))  # the deadline has passed
    failed = memory.of_type("data-om-observation-failed")
    assert [(e.thread_id, e.data.error.split(":")[0]) for e in failed] == [(A, "deadline")]
    assert [e.thread_id for e in memory.of_type("data-om-observation-end")] == [B]
    assert memory.state.in_flight is None
    assert [m.id for m in memory.state.pending] == [say(0, A).id, say(2, A).id, say(4, A).id]
    memory.feed(scripted_result(first))  # too late: recorded and ignored
    assert memory.of_type("om-result-ignored")


def test_reflection_keeps_the_thread_sections():
    memory = Memory(resource_engine(300, reflection={"observationTokens": 600}))
    for n in range(60):
        memory.feed(say(n, A if n % 3 else B))
        memory.answer_all()
    reflections = [e for e in memory.of_type("data-om-observation-end") if e.data.operation_type == "reflection"]
    assert reflections and memory.state.generation >= 1
    system = next(j for j in memory.jobs if j.kind == "reflect").messages[0].content
    assert "<thread id=" in system and "write no thread ids" not in system
    shown = {shown_thread_id(A, True), shown_thread_id(B, True)}
    assert set(_THREAD_TAG.findall(reflections[0].data.observations)) == shown


def test_temporal_markers_measure_each_threads_own_gap():
    from datetime import timedelta

    memory = Memory(resource_engine(100_000, obscureThreadIds=False, temporalMarkers=True))

    def at(n, thread, minutes):
        message = say(n, thread)
        return message.model_copy(update={"role": "user", "created_at": T0 + timedelta(minutes=minutes)})

    memory.feed(at(0, A, 0))
    memory.feed(at(1, B, 5))
    memory.feed(at(2, B, 15))  # B's own gap: 10 minutes
    memory.feed(at(3, A, 20))  # A's gap: 20 minutes, though B wrote 5 minutes before
    gaps = memory.of_type("om-temporal-gap")
    assert [(g.thread_id, g.data.precedes_message_id, g.data.gap_ms) for g in gaps] == [
        (B, say(2, B).id, 600_000), (A, say(3, A).id, 1_200_000)]
    markers = [m for m in memory.state.pending if m.title == "Signal"]
    assert [m.thread_id for m in markers] == [B, A]


def test_a_looping_batch_answer_is_asked_for_once_more_then_fails_its_threads():
    from tests.helpers import scripted_result

    memory = Memory(resource_engine(100_000, obscureThreadIds=False, observation={"maxTokensPerBatch": 200}))
    for n in range(4):
        memory.feed(say(n, (A, B)[n % 2], words=60))
    memory.feed(ObserveRequested(thread_id=A, at=T0))
    first, second = memory.waiting
    memory.waiting.clear()
    block = "\n".join(f"* 🔴 (09:0{i}) the user keeps asking about topic number {i}" for i in range(5))
    looping = f'<observations>\n<thread id="{A}">\n' + "\n".join([block] * 20)
    memory.feed(scripted_result(first, output=looping))
    [again] = memory.jobs[2:]
    assert again.cycle_id == first.cycle_id + "/again" and again.sample == 1
    assert again.request_hash != first.request_hash
    memory.feed(scripted_result(first))  # the first job's answer delivered twice: ignored
    assert memory.of_type("data-om-observation-end") == []
    memory.feed(scripted_result(again, output=looping))
    memory.feed(scripted_result(second))
    failed = memory.of_type("data-om-observation-failed")
    assert [(e.thread_id, e.data.error) for e in failed] == [(A, "Observer produced degenerate output")]
    assert [e.thread_id for e in memory.of_type("data-om-observation-end")] == [B]


def test_each_thread_of_a_resource_keeps_its_own_title():
    from omstream.schemas.control import ThreadPatched

    memory = Memory(resource_engine(100_000))
    memory.feed(ThreadPatched(thread_id=A, at=T0, title="Trip to Avignon"))
    memory.feed(ThreadPatched(thread_id=B, at=T0, title="Tent repair", title_pinned=True))
    memory.feed(ThreadPatched(thread_id=A, at=T0, title="Trip to Arles"))
    updates = [(e.data.thread_id, e.data.old_title, e.data.new_title) for e in memory.of_type("data-om-thread-update")]
    assert updates == [(A, None, "Trip to Avignon"), (B, None, "Tent repair"), (A, "Trip to Avignon", "Trip to Arles")]
    threads = memory.state.threads
    assert (threads[A].title, threads[A].title_pinned) == ("Trip to Arles", False)
    assert (threads[B].title, threads[B].title_pinned) == ("Tent repair", True)
    assert memory.state.title is None


def test_thread_titles_are_proposed_per_thread_and_kept_unless_pinned():
    from omstream.schemas.control import ThreadPatched

    memory = Memory(resource_engine(300, observation={"threadTitle": True}))
    memory.feed(ThreadPatched(thread_id=B, at=T0, title="Pinned title", title_pinned=True))
    for n in range(30):
        memory.feed(say(n, A if n % 3 else B))
        memory.answer_all()
    cycles = {e.data.cycle_id for e in memory.of_type("data-om-observation-start")}
    assert len(cycles) >= 3
    system = memory.jobs[0].messages[0].content
    assert "<thread-title>" in system
    updates = [(e.data.thread_id, e.data.old_title, e.data.new_title) for e in memory.of_type("data-om-thread-update")]
    first_words = " ".join(say(2, A).text().split()[:4])  # what A's user first said
    # A is titled once, by its first observation; B keeps its pinned title.
    assert updates == [(B, None, "Pinned title"), (A, None, first_words)]
    assert memory.state.threads[A].title == first_words and memory.state.threads[B].title == "Pinned title"
    later = memory.jobs[-1].messages[1].content
    assert f"- prior thread-title of thread {shown_thread_id(A, True)}: {first_words}" in later
    ends = [e for e in memory.of_type("data-om-observation-end") if e.thread_id == A]
    assert ends[0].data.extracted_values == {"thread-title": first_words}
    # As 1.31.0's resource strategy: a cycle's title changes come before its threads' end events.
    titled = next(e for e in memory.of_type("data-om-thread-update") if e.data.thread_id == A)
    cycle_ends = [e.seq for e in memory.of_type("data-om-observation-end") if e.data.cycle_id == titled.data.cycle_id]
    assert cycle_ends and titled.seq < min(cycle_ends)


def test_a_message_id_used_by_another_thread_of_the_resource_is_refused():
    from omstream.engine.fold import fold

    memory = Memory(resource_engine(100_000))
    memory.feed(say(0, A))
    reused = say(0, A).model_copy(update={"thread_id": B})
    out = fold(memory.state, reused, memory.config)
    assert out.rejected and "already used for a different message" in out.rejected[0].reason
    assert out.state.pending == memory.state.pending
