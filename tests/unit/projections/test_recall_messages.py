"""`recall` mode messages on the read model (spec §12): a test per parameter and per return field."""

import re
import time

import pytest

from omstream.engine.rules.tokens import get_counter
from omstream.projections.recall import RecallError
from omstream.projections.views.context import ContextProjection
from omstream.schemas.messages import DataPart, ImagePart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from tests.helpers import text_of
from tests.unit.projections.recall_helpers import ask, msg, project, source_of

COUNTER = get_counter("tokenx")
FIELDS = {"messages", "count", "cursor", "page", "limit", "detail", "hasNextPage", "hasPrevPage", "truncated",
          "tokenOffset"}


def shown_ids(answer) -> list[str]:
    return re.findall(r"^\*\*\w+ \([^)]*\)\*\* \[([^\]]+)\]:", answer["messages"], re.M)


@pytest.fixture
def thread30():
    """t1: 30 short messages a minute apart (m000 … m029)."""
    projection, _ = project([msg("t1", n, f"message number {n} about topic {n}") for n in range(30)])
    return source_of(projection)


async def test_from_the_start_every_field(thread30):
    answer = await ask(thread30, limit=5)
    assert set(answer) == FIELDS
    assert shown_ids(answer) == [f"t1-m{n:03d}" for n in range(5)]
    assert answer["count"] == 5 and answer["cursor"] == "t1-m000" and answer["page"] == 1 and answer["limit"] == 5
    assert answer["detail"] == "low" and answer["hasNextPage"] is True and answer["hasPrevPage"] is False
    assert answer["truncated"] is False and answer["tokenOffset"] == 0
    assert answer["messages"].startswith("threadId wasn't passed so used default t1.\n\n**user (2025-03-03 09:00:00Z)** [t1-m000]:\n"
                                         "  [p0] message number 0 about topic 0")


async def test_anchor_start_pages_forward(thread30):
    second = await ask(thread30, limit=10, page=2, threadId="current")
    assert shown_ids(second) == [f"t1-m{n:03d}" for n in range(10, 20)]
    assert second["hasPrevPage"] and second["hasNextPage"] and "threadId wasn't passed" not in second["messages"]
    last = await ask(thread30, limit=10, page=3, threadId="t1")
    assert shown_ids(last)[-1] == "t1-m029" and not last["hasNextPage"] and last["hasPrevPage"]
    beyond = await ask(thread30, limit=10, page=4, threadId="t1")
    assert beyond["count"] == 0 and beyond["messages"] == "(no messages found on page 4 for this thread)"


async def test_anchor_end_reads_the_newest_first_page(thread30):
    newest = await ask(thread30, anchor="end", limit=5, threadId="t1")
    assert shown_ids(newest) == [f"t1-m{n:03d}" for n in range(25, 30)]
    assert newest["hasPrevPage"] is True and newest["hasNextPage"] is False
    older = await ask(thread30, anchor="end", limit=5, page=2, threadId="t1")
    assert shown_ids(older) == [f"t1-m{n:03d}" for n in range(20, 25)] and older["hasNextPage"] is True


async def test_cursor_pages_forward_and_backward(thread30):
    fwd = await ask(thread30, cursor="t1-m010", limit=5)
    assert shown_ids(fwd) == [f"t1-m{n:03d}" for n in range(11, 16)]  # after the cursor's createdAt
    assert fwd["cursor"] == "t1-m010" and fwd["hasNextPage"] and not fwd["hasPrevPage"]
    fwd2 = await ask(thread30, cursor="t1-m010", limit=5, page=2)
    assert shown_ids(fwd2) == [f"t1-m{n:03d}" for n in range(16, 21)] and fwd2["hasPrevPage"]
    back = await ask(thread30, cursor="t1-m010", limit=5, page=-1)
    assert shown_ids(back) == [f"t1-m{n:03d}" for n in range(5, 10)] and back["page"] == -1
    assert back["hasPrevPage"] is True and back["hasNextPage"] is False
    back2 = await ask(thread30, cursor="t1-m010", limit=5, page=-2)
    assert shown_ids(back2) == [f"t1-m{n:03d}" for n in range(0, 5)]
    assert back2["hasPrevPage"] is False and back2["hasNextPage"] is True
    assert (await ask(thread30, cursor="t1-m010", limit=5, page=0))["page"] == 1  # 0 is 1


async def test_limit_is_at_most_20_for_messages(thread30):
    answer = await ask(thread30, cursor="t1-m000", limit=50)
    assert answer["limit"] == 20 and answer["count"] == 20


async def test_a_range_cursor_gets_a_hint_naming_its_ends(thread30):
    one = await ask(thread30, cursor="t1-m003:t1-m009")
    assert one["count"] == 0 and 'start="t1-m003"' in one["messages"] and 'end="t1-m009"' in one["messages"]
    many = await ask(thread30, cursor="t1-m001:t1-m002,t1-m007:t1-m008")
    assert 'start="t1-m001"' in many["messages"] and 'end="t1-m008"' in many["messages"]


async def test_an_unknown_cursor_is_refused(thread30):
    with pytest.raises(RecallError, match="Could not resolve cursor message: nope"):
        await ask(thread30, cursor="nope")


async def test_messages_of_data_parts_only_take_no_page_slot():
    messages = [msg("t1", 0, "hello"), msg("t1", 1, [DataPart(type="data-progress", data={"x": 1})]),
                msg("t1", 2, "again"), msg("t1", 3, "more")]
    answer = await ask(source_of(project(messages)[0]), limit=2, threadId="t1")
    assert shown_ids(answer) == ["t1-m000", "t1-m002"]


# --- detail, budgets, hints ---------------------------------------------------------------------
def tools_thread():
    long_text = text_of(400, 1)
    return [
        msg("t1", 0, long_text, role="user"),
        msg("t1", 1, [ReasoningPart(text="thinking " + text_of(80, 2)),
                      ToolCallPart(tool_call_id="c1", tool_name="weather", args={"city": "Paris", "days": 3}),
                      TextPart(text="Let me check.")], role="assistant"),
        msg("t1", 2, [ToolResultPart(tool_call_id="c1", tool_name="weather", result={"forecast": text_of(150, 3)})],
            role="tool"),
        msg("t1", 3, [TextPart(text="Here is a photo"), ImagePart(image="https://x/y.png", filename="y.png")],
            role="user"),
        msg("t1", 4, [ToolCallPart(tool_call_id="c2", tool_name="search", args={"q": "louvre"})], role="assistant"),
    ], long_text


async def test_low_detail_parts_are_cut_to_their_budget_with_a_hint_then_expanded():
    messages, long_text = tools_thread()
    source = source_of(project(messages)[0])
    answer = await ask(source, threadId="t1")
    text = answer["messages"]
    assert "  [p1] [Tool Call: weather]\n  [p2] Let me check." in text  # no arguments at low detail
    assert "[p0] [Tool Result: weather]\n" in text and '[recall cursor="t1-m002" partIndex=0 detail="high" for more]' in text
    assert "[p1] [Image: y.png]" in text
    # The user's long text: cut at 100 tokens at first, then expanded to 200 with the budget left.
    user = re.search(r"\[t1-m000\]:\n  \[p0\] (.*?) \[recall", text, re.S).group(1)
    assert 150 < COUNTER.count(user) <= 200 and long_text.startswith(user)
    assert answer["truncated"] is False and COUNTER.count(text) <= 2000


async def test_high_detail_returns_one_part_with_how_to_continue():
    messages, _ = tools_thread()
    source = source_of(project(messages)[0])
    answer = await ask(source, cursor="t1-m000", detail="high")
    assert answer["count"] == 1 and answer["detail"] == "high"
    assert "[t1-m001]:\n  [p0] thinking" in answer["messages"]
    assert answer["messages"].endswith('High detail returns 1 part at a time. To continue: next part: partIndex=1 '
                                       'on cursor="t1-m001", or next message: partIndex=0 on cursor="t1-m002".')
    calls = await ask(source, cursor="t1-m000", detail="high", partType="tool-call")
    assert '[Tool Call: weather]\n{\n  "city": "Paris",\n  "days": 3\n}' in calls["messages"]  # args at high detail


async def test_part_type_and_tool_name_filter_parts():
    messages, _ = tools_thread()
    source = source_of(project(messages)[0])
    calls = await ask(source, threadId="t1", partType="tool-call")
    assert re.findall(r"\[Tool Call: (\w+)\]", calls["messages"]) == ["weather", "search"]
    assert "[Tool Result" not in calls["messages"] and "Here is a photo" not in calls["messages"]
    weather = await ask(source, threadId="t1", toolName="weather")
    assert "[Tool Call: weather]" in weather["messages"] and "[Tool Result: weather]" in weather["messages"]
    assert "search" not in weather["messages"]
    none = await ask(source, threadId="t1", toolName="nothing")
    assert none["messages"] == "threadId wasn't passed so used default t1.\n\n(no message parts matched the current filters)" \
        or none["messages"] == "(no message parts matched the current filters)"
    images = await ask(source, threadId="t1", partType="image")
    assert images["messages"] == "**user (2025-03-03 09:03:00Z)** [t1-m003]:\n  [p1] [Image: y.png]"


async def test_the_2000_token_budget_cuts_hard_and_says_how_much():
    projection, _ = project([msg("t1", n, text_of(300, n)) for n in range(20)])
    answer = await ask(source_of(projection), threadId="t1", limit=20)
    assert answer["truncated"] is True and answer["tokenOffset"] > 0
    assert COUNTER.count(answer["messages"]) <= 2000
    print("20 messages of 300 words at low detail:", answer["tokenOffset"], "tokens left out")


async def test_the_budget_uses_the_configured_counter():
    projection, _ = project([msg("t1", n, text_of(300, n)) for n in range(20)])
    answer = await ask(source_of(projection, "tiktoken"), threadId="t1", limit=20)
    assert answer["truncated"] and get_counter("tiktoken").count(answer["messages"]) <= 2000


# --- partIndex and charOffset --------------------------------------------------------------------
async def test_part_index_returns_the_part_whole_with_every_field():
    messages, _ = tools_thread()
    source = source_of(project(messages)[0])
    part = await ask(source, cursor="t1-m001", partIndex=1)
    assert part == {"text": '[Tool Call: weather]\n{\n  "city": "Paris",\n  "days": 3\n}', "messageId": "t1-m001",
                    "partIndex": 1, "role": "assistant", "type": "tool-call", "truncated": False, "charOffset": 0}


async def test_a_long_part_is_read_in_chunks_with_char_offset():
    big = text_of(3000, 7)
    source = source_of(project([msg("t1", 0, big), msg("t1", 1, "next one")])[0])
    pieces, offset, calls = [], None, 0
    while True:
        kwargs = {"charOffset": offset} if offset is not None else {}
        part = await ask(source, cursor="t1-m000", partIndex=0, **kwargs)
        calls += 1
        assert COUNTER.count(part["text"]) <= 2000 and part["charOffset"] == (offset or 0)
        pieces.append(part["text"])
        if "nextCharOffset" not in part:
            assert part["truncated"] is False and "note" not in part
            break
        assert part["truncated"] is True
        assert part["note"] == (f'To continue this part, call recall cursor="t1-m000" partIndex=0 detail="high" '
                                f'charOffset={part["nextCharOffset"]}.')
        offset = part["nextCharOffset"]
    assert "".join(pieces) == big and calls >= 2
    print(f"a part of {COUNTER.count(big)} tokens read in {calls} calls")


async def test_past_the_last_part_the_next_message_is_shown():
    source = source_of(project([msg("t1", 0, "only part"), msg("t1", 1, [DataPart(type="data-x", data={})]),
                                msg("t1", 2, "the next visible")])[0])
    part = await ask(source, cursor="t1-m000", partIndex=3)
    assert part["messageId"] == "t1-m002" and part["partIndex"] == 0
    assert part["text"].startswith("Part index 3 not found in message t1-m000; showing partIndex 0 from next message t1-m002.")
    with pytest.raises(RecallError, match="Available indices: 0"):
        await ask(source_of(project([msg("t1", 0, "only part")])[0]), cursor="t1-m000", partIndex=2)


async def test_a_range_cursor_with_part_index_is_refused_with_the_hint(thread30):
    with pytest.raises(RecallError, match='start="t1-m001"'):
        await ask(thread30, cursor="t1-m001:t1-m004", partIndex=0)


async def test_paging_a_long_thread_stays_fast():
    """10 threads of 1,000 messages in the read model: the first call sorts the thread once,
    the next pages and the thread list reuse it."""
    projection = ContextProjection()
    for t in range(10):
        view = projection.view(f"t{t}")
        for n in range(1000):
            m = msg(f"t{t}", n, text_of(60, n))
            view.messages[m.id] = m
    source = source_of(projection)
    started = time.perf_counter()
    await ask(source, "t0", cursor="t0-m500")
    first = time.perf_counter() - started
    took = []
    for i in range(50):
        started = time.perf_counter()
        answer = await ask(source, "t0", cursor=f"t0-m{(i * 17) % 999:03d}", page=-1)
        took.append(time.perf_counter() - started)
    started = time.perf_counter()
    listed = await ask(source, "t0", mode="threads")
    threads = time.perf_counter() - started
    took.sort()
    print(f"first page {first * 1000:.0f} ms, next pages p50 {took[25] * 1000:.1f} ms max {took[-1] * 1000:.1f} ms, "
          f"threads {threads * 1000:.1f} ms")
    assert listed["count"] == 10 and answer["limit"] == 20
    assert first < 1.0 and took[25] < 0.1 and threads < 0.5


async def test_ids_with_colons_are_cursors_and_their_ranges_split_in_the_middle():
    """`om produce` names lines `<threadId>:<n>`: such an id is a cursor, not a range."""
    messages = [msg("t1", n, f"line {n}").model_copy(update={"id": f"t1:{n}"}) for n in range(4)]
    source = source_of(project(messages)[0])
    page = await ask(source, cursor="t1:1", limit=2)
    assert shown_ids(page) == ["t1:2", "t1:3"]
    hint = await ask(source, cursor="t1:0:t1:3")
    assert 'start="t1:0"' in hint["messages"] and 'end="t1:3"' in hint["messages"]
