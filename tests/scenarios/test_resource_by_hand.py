"""Two threads of one resource, every figure derived by hand from the spec (§5.1, §5.2, §6.1, §6.10).

The messages are made of the word "cat", so their tokens can be counted on paper with the
estimator's rules (§5.1): a segment of at most 3 characters is 1 token, a longer word without
punctuation `ceil(len/6)`, whitespace 0, and a run of separators (`<>:-=()` …) is one segment.
The answers of the Observer are written here too, so the observation figures are hand-counted
as well.  No figure below is read back from the code under test.

Counting rules used throughout (§5.2): a message is `round(role + payload + 3.8)` with
"user" = 1 token and "assistant" = ceil(9/6) = 2; a window adds 24 for the conversation.
So a user message of k "cat"s is k + 5 tokens, an assistant one round(k + 5.8) = k + 6.

An `<other-conversation>` block (§6.10) shown to thread X for thread Y's unobserved messages:
  `<other-conversation id="Y">`  < other - conversation(12 → 2) id = "Y" >  = 9
  `Mar 3 2025:`                  Mar 3 2025 :                              = 4
  `User (9:03 AM): ` + k cats    User ( 9 : 03 AM ):                      = 7 + k
  `Assistant (9:04 AM): ` + k    Assistant(9 → 2) ( 9 : 04 AM ):          = 8 + k
  `</other-conversation>`        </ other - conversation >                 = 6
"""

from __future__ import annotations

from datetime import timedelta

from omstream.schemas.messages import Message
from tests.helpers import T0, scripted_result
from tests.unit.engine.resource_helpers import Memory, resource_engine

A, B = "a", "b"
THRESHOLD = 300  # observation.messageTokens


def cats(n: int, thread: str, words: int, minute: int, role: str = "user") -> Message:
    return Message(id=f"m{n}", thread_id=thread, resource_id="u1", role=role,
                   content=" ".join(["cat"] * words), created_at=T0 + timedelta(minutes=minute))


def answer(memory: Memory, text: str) -> None:
    [job] = memory.waiting
    memory.waiting.clear()
    memory.feed(scripted_result(job, output=text))


def window(memory: Memory) -> tuple[int, int]:
    """The last status's active message window: (tokens, threshold)."""
    messages = memory.of_type("data-om-status")[-1].data.windows.active.messages
    return messages.tokens, messages.threshold


def figures(memory: Memory, kind: str, cycle_id: str) -> list[tuple]:
    return [(e.thread_id, e.data.tokens_to_observe if kind.endswith("start") else
             (e.data.tokens_observed, e.data.observation_tokens))
            for e in memory.of_type(kind) if e.data.cycle_id == cycle_id]


FIRST_ANSWER = """<observations>
<thread id="a">
Date: Mar 3, 2025
* 🔴 (09:00) User likes cats
</thread>
<thread id="b">
Date: Mar 3, 2025
* 🟡 (09:02) User asked about dogs
</thread>
</observations>"""
# Thread a's text:  `Date: Mar 3, 2025`  Date : Mar 3 , 2025                       = 6
#                   `* 🔴 (09:00) User likes cats`  * 🔴 ( 09 : 00 ) User likes(5 → 1) cats = 10
# Thread b's text:  6 + `* 🟡 (09:02) User asked about dogs` (* 🟡 ( 09 : 02 ) User asked about dogs) = 6 + 11
FIRST_CYCLE_TOKENS = (6 + 10) + (6 + 11)

SECOND_ANSWER = """<observations>
<thread id="b">
Date: Mar 3, 2025
* 🟢 (09:03) User described a long story
</thread>
<thread id="a">
Date: Mar 3, 2025
* 🟡 (09:05) User mentioned a vet
</thread>
</observations>"""
# b: 6 + (* 🟢 ( 09 : 03 ) User described(9 → 2) a long story) = 6 + 13
# a: 6 + (* 🟡 ( 09 : 05 ) User mentioned(9 → 2) a vet)       = 6 + 12
SECOND_CYCLE_TOKENS = (6 + 13) + (6 + 12)


def test_two_threads_of_one_resource_report_the_figures_counted_by_hand():
    memory = Memory(resource_engine(THRESHOLD, obscureThreadIds=False))

    # Thread a: 100 cats from the user (105), 95 from the assistant (round(2 + 95 + 3.8) = 101).
    memory.feed(cats(1, A, 100, minute=0))
    memory.feed(cats(2, A, 95, minute=1, role="assistant"))
    assert window(memory) == (24 + 105 + 101, THRESHOLD)  # 230: below 300, nothing starts
    assert not memory.jobs

    # Thread b's first turn (60 cats, 65 tokens) is 89 tokens on its own, but b's window counts
    # a's unobserved messages as the Observer would see them (§6.1): 9 + 4 + (7 + 100) + (8 + 95)
    # + 6 = 229, so 24 + 65 + 229 = 318 >= 300 and one observation of both threads starts.
    memory.feed(cats(3, B, 60, minute=2))
    starts = memory.of_type("data-om-observation-start")
    cycle = starts[0].data.cycle_id
    # Largest first until the threshold (a 230, then b 89: 319 >= 300), ordered by oldest
    # message (a at 9:00, b at 9:02); one start per thread, one cycle, threadIds naming both.
    assert figures(memory, "data-om-observation-start", cycle) == [(A, 230), (B, 24 + 65)]
    assert {s.data.thread_ids for s in starts} == {(A, B)}
    [job] = memory.waiting
    assert job.input_tokens == 230 + 89

    answer(memory, FIRST_ANSWER)
    # Each end: the thread's own tokensObserved, the whole cycle's new text in observationTokens
    # (1.31.0's resource strategy sums its threads' answers: `cycleObservationTokens`).
    assert FIRST_CYCLE_TOKENS == 33
    assert figures(memory, "data-om-observation-end", cycle) == [(A, (230, 33)), (B, (89, 33))]
    # The log: a's section, a boundary at b's newest message, b's section.
    #   `<thread id="a">` = < thread id = "a" > = 6;  `</thread>` = </ thread > = 3
    #   `--- message boundary (2025-03-03T09:02:00.000Z) ---`
    #     --- message(7 → 2) boundary(8 → 2) ( 2025 - 03 - 03T09(5 → 1) : 02 : 00 . 000Z ) --- = 19
    assert memory.state.observations == (
        '<thread id="a">\nDate: Mar 3, 2025\n* 🔴 (09:00) User likes cats\n</thread>\n\n'
        "--- message boundary (2025-03-03T09:02:00.000Z) ---\n\n"
        '<thread id="b">\nDate: Mar 3, 2025\n* 🟡 (09:02) User asked about dogs\n</thread>')
    first_log = (6 + 16 + 3) + 19 + (6 + 17 + 3)
    assert memory.state.observation_tokens == first_log == 70
    status = memory.of_type("data-om-status")[-1].data
    assert (status.thread_id, window(memory)) == (B, (0, THRESHOLD))
    assert status.windows.active.observations.tokens == 70

    # Thread b goes on alone: 120 cats (125), then 110 from the assistant (round(117.8) = 116).
    memory.feed(cats(4, B, 120, minute=3))
    assert window(memory) == (24 + 125, THRESHOLD)  # a has nothing unobserved: no block
    memory.feed(cats(5, B, 110, minute=4, role="assistant"))
    assert window(memory) == (24 + 125 + 116, THRESHOLD)  # 265

    # a's next turn (10 cats, 15 tokens) sees b's block: 9 + 4 + (7 + 120) + (8 + 110) + 6 = 264,
    # so 24 + 15 + 264 = 303 >= 300.  Largest first: b (265), then a (39): 304 >= 300; b's
    # oldest message (9:03) precedes a's (9:05), so b comes first this time.
    memory.feed(cats(6, A, 10, minute=5))
    second = memory.of_type("data-om-observation-start")[-1].data.cycle_id
    assert second != cycle
    assert figures(memory, "data-om-observation-start", second) == [(B, 265), (A, 24 + 15)]

    answer(memory, SECOND_ANSWER)
    assert SECOND_CYCLE_TOKENS == 37
    assert figures(memory, "data-om-observation-end", second) == [(B, (265, 37)), (A, (39, 37))]
    # Same date as each thread's section: the new lines go inside it (§6.10), no new boundary.
    assert memory.state.observations == (
        '<thread id="a">\nDate: Mar 3, 2025\n* 🔴 (09:00) User likes cats\n* 🟡 (09:05) User mentioned a vet\n'
        "</thread>\n\n--- message boundary (2025-03-03T09:02:00.000Z) ---\n\n"
        '<thread id="b">\nDate: Mar 3, 2025\n* 🟡 (09:02) User asked about dogs\n'
        "* 🟢 (09:03) User described a long story\n</thread>")
    assert memory.state.observation_tokens == first_log + 12 + 13 == 95
    assert window(memory) == (0, THRESHOLD)
    observed = [i for e in memory.of_type("data-om-observation-end") for i in e.data.observed_message_ids]
    assert sorted(observed) == [f"m{n}" for n in range(1, 7)]
