"""Degenerate observer output (spec §7.6, §15 item 9)."""

from omstream.engine.prompting.parsing import is_degenerate, parse_observer_output


def test_a_single_giant_line_is_truncated_not_flagged():
    line = " ".join(f"word{i}" for i in range(9000))  # > 50 000 characters, not a loop
    assert len(line) > 50_000
    parsed = parse_observer_output(f"<observations>\n* 🔴 (09:00) {line}\n</observations>")
    assert not parsed.degenerate
    assert len(parsed.observations) < 11_000 and parsed.observations.endswith("… [truncated]")


def test_many_repeated_short_tool_lines_are_real_content():
    text = "* 🟡 (09:00) Agent ran tests\n" + "  * -> ran `pytest -q`\n" * 200
    assert not is_degenerate(text)


def test_alternating_short_lines_are_not_flagged():
    assert not is_degenerate("* ok\n* no\n" * 400)


def test_a_repeated_block_is_flagged():
    block = "\n".join(f"* 🔴 (09:0{i}) the user keeps asking about topic number {i}" for i in range(5))
    assert is_degenerate("\n".join([block] * 20))


def test_a_long_line_repeated_back_to_back_is_flagged():
    line = "* 🔴 (09:00) " + "the assistant repeats itself over and over again without end " * 2
    assert len(line) > 80
    assert is_degenerate("\n".join([line] * 300))


def test_short_text_is_never_flagged():
    assert not is_degenerate("* 🔴 (09:00) hi\n" * 50)
