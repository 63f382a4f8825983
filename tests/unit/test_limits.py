"""The input limits (omstream.limits): pure checks on raw bytes and decoded messages."""

from datetime import UTC, datetime

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.limits import Limits, check_held, check_message, check_raw, json_depth
from omstream.schemas.messages import Message
from omstream.settings import Settings

LIMITS = Limits()
T = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
T_MS = round(T.timestamp() * 1000)


def message(content, at=T) -> Message:
    return Message(id="m1", thread_id="t1", role="user", content=content, created_at=at)


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def test_depth_counts_arrays_and_objects_and_skips_strings():
    assert json_depth(b"1") == 0
    assert json_depth(b'{"a":[1,{"b":2}]}') == 3
    assert json_depth(b'{"a":"[[[[{{{{\\"[[["}') == 1  # brackets and escaped quotes inside a string
    assert json_depth(b'["\\\\", [[]]]') == 3  # an escaped backslash ends before the quote
    assert json_depth(nested(300)) == 300
    assert json_depth(nested(300), stop_after=64) == 65


def test_raw_limits_size_then_depth():
    assert check_raw(orjson.dumps({"id": "m"}), LIMITS) is None
    assert check_raw(nested(64), LIMITS) is None
    deep = check_raw(nested(65), LIMITS)
    assert deep.code == "too-deep" and "64" in deep.reason
    big = check_raw(b'"' + b"x" * (512 * 1024) + b'"', LIMITS)
    assert big.code == "too-large" and "max_record_bytes" in big.reason
    assert check_raw(None, LIMITS) is None


def test_parts_and_characters_per_part():
    assert check_message(message("hi"), LIMITS, T_MS) is None
    many = [{"type": "text", "text": "x"}] * 201
    assert check_message(message(many), LIMITS, T_MS).code == "too-many-parts"
    assert check_message(message(many[:200]), LIMITS, T_MS) is None
    assert check_message(message("x" * 100_001), LIMITS, T_MS).code == "text-too-long"
    long_part = [{"type": "text", "text": "ok"}, {"type": "text", "text": "x" * 100_001}]
    found = check_message(message(long_part), LIMITS, T_MS)
    assert found.code == "text-too-long" and "part 1" in found.reason


def test_created_at_ahead_of_the_log_time():
    skew = LIMITS.max_clock_skew_ms
    assert check_message(message("hi"), LIMITS, T_MS - skew) is None  # exactly the skew: accepted
    found = check_message(message("hi"), LIMITS, T_MS - skew - 1)
    assert found.code == "future-time" and "ahead" in found.reason
    assert check_message(message("hi"), LIMITS, None) is None  # no log time: nothing to compare
    assert check_message(message("hi"), LIMITS, T_MS + 10**9) is None  # the past is fine


def test_held_inputs_and_settings():
    assert check_held(999, LIMITS) is None
    assert check_held(10_000, LIMITS).code == "memory-busy"
    assert Limits.from_settings(Settings(max_depth=8)).max_depth == 8
    assert Limits.from_settings(Settings()) == LIMITS


def _byte_scan_depth(raw: bytes) -> int:
    """The byte-by-byte scanner `json_depth` replaced: the oracle it must agree with."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


@settings(max_examples=2000)
@given(st.lists(st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b"a", b":", b"\n", b"\xff"]),
                max_size=80).map(b"".join))
def test_json_depth_agrees_with_a_byte_by_byte_scan(raw):
    assert json_depth(raw) == _byte_scan_depth(raw)
