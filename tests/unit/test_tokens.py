import json
from pathlib import Path

import pytest

from schemas.messages import Message
from streams.engine.tokens import TokenxCounter, count_message, count_messages, get_counter

SCENARIO = Path(__file__).resolve().parents[3] / "shared" / "scenarios" / "long-thread" / "conversation.jsonl"


# Expected values taken from tokenx 1.3.0 itself (node, estimateTokenCount).
@pytest.mark.parametrize(("text", "tokens"), [
    ("", 0), ("   ", 0), ("hello", 1), ("abc", 1), ("12,345.67", 5), ("2025", 1), ("internationalization", 4),
    ("über", 2), ("straße", 2), ("日本語", 3), ("a.b", 3), ("...", 1), ("hello, world!", 4),
])
def test_tokenx_segments(text, tokens):
    assert TokenxCounter().count(text) == tokens


def test_emoji_counts_utf16_units():
    # "🔴🔴" is 4 UTF-16 units: not a short segment, no punctuation -> ceil(4 / 6)
    assert TokenxCounter().count("🔴🔴") == 1
    assert TokenxCounter().count("🔴") == 1


@pytest.mark.skipif(not SCENARIO.exists(), reason="shared scenarios not laid out beside the repo")
def test_long_thread_windows_match_the_recording():
    counter = get_counter("tokenx")
    lines = SCENARIO.read_text().splitlines()
    counts = [count_message(Message.model_validate({**json.loads(l), "id": str(i)}), counter)
              for i, l in enumerate(lines)]
    # expected-sync-timeline.txt: step-0 windows of turns 0, 1 and 2
    assert count_messages(counts[:1]) == 647
    assert count_messages(counts[:3]) == 1894
    assert count_messages(counts[:5]) == 3137


def test_tiktoken_counts_offline():
    counter = get_counter("tiktoken")
    assert counter.name == "tiktoken:o200k_base"
    assert counter.count("hello world") == 2


def test_unknown_counter_is_refused():
    with pytest.raises(ValueError, match="tiktoken"):
        get_counter("wordpiece")


def test_data_and_reasoning_parts_count_zero():
    counter = get_counter("tokenx")
    plain = Message(id="a", thread_id="t", role="user", content=[{"type": "text", "text": "hello there"}],
                    created_at="2025-01-01T00:00:00Z")
    noisy = Message(id="a", thread_id="t", role="user", created_at="2025-01-01T00:00:00Z", content=[
        {"type": "text", "text": "hello there"}, {"type": "data-om-status"},
        {"type": "reasoning", "text": "thinking hard about it"}])
    assert count_message(plain, counter) == count_message(noisy, counter)
    assert count_messages([]) == 0
