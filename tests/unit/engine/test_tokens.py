import base64
import json
import math
import os
import struct
import subprocess
import sys
import zlib

import pytest

from omstream.engine.rules.attachments import (
    file_tokens_from_bytes,
    image_dimensions,
    image_tokens,
    is_image_like_file,
    model_context,
)
from omstream.engine.rules.tokens import TokenxCounter, count_message, count_messages, get_counter, js_json
from omstream.schemas.messages import Message
from tests.helpers import LONG_THREAD

SCENARIO = LONG_THREAD / "conversation.jsonl"


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


def test_the_package_start_up_points_tiktoken_at_litellms_files_without_importing_litellm():
    # The engine writes no environment: `omstream/__init__.py`, which runs before any of it, does.
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "CUSTOM_TIKTOKEN_CACHE_DIR")}
    code = ("import json, os, sys; from omstream.engine.rules.tokens import get_counter; "
            "n = get_counter('tiktoken').count('hello world'); "
            "print(json.dumps([os.environ.get('TIKTOKEN_CACHE_DIR'), n, 'litellm' in sys.modules]))")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         timeout=120)
    folder, count, litellm_loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert folder.endswith(os.path.join("litellm", "litellm_core_utils", "tokenizers"))
    assert count == 2 and not litellm_loaded
    kept = subprocess.run([sys.executable, "-c", code], env={**env, "TIKTOKEN_CACHE_DIR": folder},
                          capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(kept.stdout.strip().splitlines()[-1])[0] == folder


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


# --- message parts (spec §5.2) and attachments (spec §5.3) -------------------------------------
TOKENX = TokenxCounter()
ONE_PIXEL_PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVQIHWP4////fwAJ+"
                 "wP9KobjigAAAABJRU5ErkJggg==")


def msg(*parts, role="assistant", metadata=None, **extra):
    body = {"id": "m", "threadId": "t", "role": role, "createdAt": "2025-01-01T00:00:00Z", "content": list(parts)}
    if metadata is not None:
        body["metadata"] = metadata
    return Message.model_validate({**body, **extra})


def js_round(x):
    return math.floor(x + 0.5)


def expected(*pieces, role="assistant", overhead=3.8, counter=TOKENX):
    """round(role + Σ estimate(piece) (numbers taken as they are) + overhead)."""
    payload = counter.count(role) + sum(p if isinstance(p, int | float) else counter.count(p) for p in pieces)
    return js_round(payload + overhead)


def image(url="https://example.com/cat.png", **fields):
    return {"type": "image", "image": url, **fields}


def payload_of(message, model=None):
    """The attachment payload of a one-part message: its count minus role and overhead."""
    return count_message(message, TOKENX, model) - TOKENX.count(message.role) - 4  # 3.8 rounds up with it


# The test-verified values of spec §5.3 are the attachment's own estimate (the part payload);
# the whole message adds its role and the 3.8 overhead.
def test_url_image_without_a_model_is_85():
    m = msg(image())
    assert image_tokens(m.content[0].model_dump(by_alias=True, exclude_none=True), None) == 85
    assert count_message(m, TOKENX) == expected(85) == 91


def test_two_million_character_base64_png_on_gpt_4o_is_765():
    m = msg(image("data:image/png;base64," + "a" * 2_000_000), metadata={"provider": "openai", "model": "gpt-4o"})
    assert count_message(m, TOKENX) == expected(765)


def test_2048_by_1024_on_an_unknown_provider_is_1105():
    m = msg(image(width=2048, height=1024))
    assert count_message(m, TOKENX, "test-model") == expected(1105)


@pytest.mark.parametrize(("model", "tokens"), [("gpt-4o", 765), ("gpt-4o-mini", 25_501)])
def test_1024_square_high_detail_per_openai_family(model, tokens):
    part = image(providerOptions={"openai": {"detail": "high"}},
                 providerMetadata={"mastra": {"imageDimensions": {"width": 1024, "height": 1024}}})
    assert count_message(msg(part), TOKENX, f"openai/{model}") == expected(tokens)


def test_gemini_3_uses_the_media_resolution():
    part = image(providerOptions={"google": {"mediaResolution": "medium"}})
    m = msg(part, metadata={"provider": "google", "model": "gemini-3-flash-preview"})
    assert count_message(m, TOKENX) == expected(560)
    assert count_message(msg(image()), TOKENX, "google/gemini-3-pro") == expected(1120)  # unspecified


def test_anthropic_sizing_follows_the_provider_not_the_model_name():
    part = image(providerMetadata={"mastra": {"imageDimensions": {"width": 750, "height": 750}}})
    assert count_message(msg(part, metadata={"provider": "anthropic", "model": "gpt-4o"}), TOKENX) == expected(750)


def test_older_gemini_counts_768_pixel_tiles():
    assert count_message(msg(image(width=769, height=769)), TOKENX, "google/gemini-2.5-flash") == expected(1032)
    assert payload_of(msg(image()), "google/gemini-2.5-flash") == 258  # unknown size: one tile
    assert payload_of(msg(image()), "gemini/gemini-2.5-flash") == 258  # litellm's prefix


def test_actor_model_in_the_metadata_wins_over_the_observer_model():
    m = msg(image(width=769, height=769), metadata={"provider": "openai", "model": "gpt-4o"})
    assert count_message(m, TOKENX, "google/gemini-2.5-flash") == expected(85 + 4 * 170)  # 768x768 after scaling
    assert count_message(m.model_copy(update={"metadata": None}), TOKENX, "google/gemini-2.5-flash") == expected(1032)


def test_anthropic_scales_the_long_edge_and_buckets_bytes():
    ctx = model_context("anthropic/claude-sonnet-4")
    assert image_tokens({"type": "image", "image": "u", "width": 3136, "height": 1568}, ctx) == math.ceil(1568 * 784 / 750)
    assert image_tokens({"type": "image", "image": "https://x/a.png"}, ctx) == 1600
    for chars, tokens in [(400_000, 341), (2_000_000, 1366), (5_000_000, 2048), (6_000_000, 2731)]:
        assert image_tokens({"type": "image", "image": "a" * chars}, ctx) == tokens


def test_openai_detail_auto_and_byte_buckets():
    ctx = model_context("openai/gpt-4o")
    assert image_tokens({"type": "image", "image": "u", "width": 768, "height": 500}, ctx) == 85  # auto -> low
    assert image_tokens({"type": "image", "image": "u", "width": 769, "height": 500}, ctx) == 85 + 2 * 170
    assert image_tokens({"type": "image", "image": "u", "detail": "low", "width": 4000, "height": 4000}, ctx) == 85
    high = {"type": "image", "detail": "high"}
    for chars, tiles in [(600_000, 1), (2_000_000, 4), (5_000_000, 6), (6_000_000, 8)]:
        assert image_tokens({**high, "image": "a" * chars}, ctx) == 85 + tiles * 170
    assert image_tokens({**high, "image": "https://x/a.png"}, ctx) == 85 + 4 * 170  # fallback tiles
    assert image_tokens({"type": "image", "image": "a" * 2_000_000}, ctx) == 85 + 4 * 170  # auto: > 1 MiB


@pytest.mark.parametrize(("model", "low"), [("gpt-5-mini", 70), ("o3", 75), ("computer-use-preview", 65),
                                              ("gpt-4.1", 85)])
def test_openai_family_base_tokens(model, low):
    assert image_tokens({"type": "image", "image": "u", "detail": "low"}, model_context(model, "openai")) == low


def test_image_like_files_are_counted_as_images():
    data = "data:image/png;base64," + "a" * 2_000_000
    m = msg({"type": "file", "data": data, "mimeType": "image/png", "filename": "cat.png"},
            metadata={"provider": "openai", "model": "gpt-4o"})
    assert count_message(m, TOKENX) == expected(765)
    by_url = {"type": "file", "url": "https://example.com/reference-board.png", "mimeType": "application/octet-stream"}
    assert is_image_like_file(by_url) and count_message(msg(by_url), TOKENX) == expected(85)
    assert is_image_like_file({"type": "file", "data": "aGk=", "mimeType": "x/y", "filename": "a.HEIC"})
    assert not is_image_like_file({"type": "file", "url": "https://x/a.pdf", "mimeType": "application/pdf"})


def test_non_image_files_by_bytes_or_descriptor():
    data = "a" * 200_000  # 150 000 bytes
    pdf = {"type": "file", "data": data, "mimeType": "application/pdf", "filename": "plan.pdf"}
    assert payload_of(msg(pdf)) == 150_000 // 4
    assert payload_of(msg(pdf), "google/gemini-2.5-flash") == 150_000 // 20
    assert payload_of(msg(pdf), "anthropic/claude-sonnet-4") == 50_000
    assert file_tokens_from_bytes(None, "application/pdf; charset=binary", 100) == 500
    assert file_tokens_from_bytes("google", "application/pdf", 100) == 258
    assert file_tokens_from_bytes("anthropic", "APPLICATION/PDF", 100) == 1500
    assert file_tokens_from_bytes(None, "text/plain", 1) == 1
    assert payload_of(msg({"type": "file", "data": "aGVsbG8=", "mimeType": "text/plain"})) == 2  # 5 bytes
    by_url = msg({"type": "file", "url": "https://example.com/specs/floorplan.pdf", "mimeType": "application/pdf"})
    descriptor = '{"type":"file","mimeType":"application/pdf","filename":"floorplan.pdf"}'
    assert count_message(by_url, TOKENX) == expected(descriptor)


def test_a_part_can_pin_its_own_estimate():
    pinned = {"providerMetadata": {"mastra": {"tokenEstimate": {"v": 0, "source": "client", "key": "client",
                                                                "tokens": 1234}}}}
    assert count_message(msg(image(**pinned)), TOKENX) == expected(1234)
    keyed = {"providerMetadata": {"mastra": {"tokenEstimate": {"a": {"source": "v7:tokenx", "tokens": 1},
                                                               "client": {"source": "client", "tokens": 7}}}}}
    assert count_message(msg({"type": "file", "url": "https://x/a.pdf", "mimeType": "application/pdf", **keyed}),
                         TOKENX) == expected(7)
    negative = {"providerMetadata": {"mastra": {"tokenEstimate": {"source": "client", "tokens": -5}}}}
    assert count_message(msg(image(**negative)), TOKENX) == expected(85)


def test_client_token_estimate_replaces_the_count_of_a_message_with_attachments_only():
    with_image = msg({"type": "text", "text": "look"}, image(), metadata={"clientTokenEstimate": 40})
    assert count_message(with_image, TOKENX) == 40
    text_only = msg({"type": "text", "text": "look"}, metadata={"clientTokenEstimate": 40})
    assert count_message(text_only, TOKENX) == expected("look")


def test_inline_image_dimensions_are_read_from_the_header():
    assert image_dimensions(base64.b64decode(ONE_PIXEL_PNG.split(",", 1)[1])) == (1, 1)
    png = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", 2048, 1024) + b"\x08\x06\0\0\0"
    assert image_dimensions(png) == (2048, 1024)
    assert image_dimensions(b"GIF89a" + struct.pack("<HH", 300, 200)) == (300, 200)
    jpeg = (b"\xff\xd8" + b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0" + b"\0" * 9
            + b"\xff\xc0" + struct.pack(">HBHH", 17, 8, 600, 800) + b"\x03")
    assert image_dimensions(jpeg) == (800, 600)
    vp8x = b"RIFF\0\0\0\0WEBPVP8X" + b"\0" * 8 + (1279).to_bytes(3, "little") + (719).to_bytes(3, "little")
    assert image_dimensions(vp8x) == (1280, 720)
    bits = (640 - 1) | ((480 - 1) << 14)
    vp8l = b"RIFF\0\0\0\0WEBPVP8L" + b"\0" * 4 + b"\x2f" + bits.to_bytes(4, "little")
    assert image_dimensions(vp8l) == (640, 480)
    assert image_dimensions(b"not an image") is None
    # decoded from an inline data URI: 2048x1024 on gpt-4o is high detail, 6 tiles
    uri = "data:image/png;base64," + base64.b64encode(png + zlib.compress(b"\0" * 64)).decode()
    assert count_message(msg(image(uri)), TOKENX, "openai/gpt-4o") == expected(85 + 6 * 170)
    assert count_message(msg(image(ONE_PIXEL_PNG)), TOKENX, "openai/gpt-4o") == expected(85)


# --- §5.2, one rule each ------------------------------------------------------------------------
def test_text_parts_count_their_text():
    m = msg({"type": "text", "text": "hello there"}, {"type": "text", "text": "general kenobi"})
    assert count_message(m, TOKENX) == expected("hello there", "general kenobi")


def test_tool_call_with_string_arguments():
    m = msg({"type": "tool-call", "toolCallId": "c", "toolName": "search", "args": "q=lyon weather"})
    assert count_message(m, TOKENX) == expected("search", "q=lyon weather")


def test_tool_call_with_object_arguments_is_json_and_twelve_cheaper():
    args = {"q": "lyon", "n": 3.0, "city": "Zürich", "nested": {"ok": True, "none": None}}
    m = msg({"type": "tool-call", "toolCallId": "c", "toolName": "search", "args": args})
    assert js_json(args) == '{"q":"lyon","n":3,"city":"Zürich","nested":{"ok":true,"none":null}}'
    assert count_message(m, TOKENX) == expected("search", js_json(args), overhead=3.8 - 12)


def result_part(**fields):
    return {"type": "tool-result", "toolCallId": "c", "toolName": "lookup", **fields}


def test_tool_result_string_is_one_more_message():
    m = msg(result_part(result="sunny and warm"), role="tool")
    assert count_message(m, TOKENX) == expected("lookup", "sunny and warm", role="tool", overhead=7.6)


def test_tool_result_object_is_indented_json_and_twelve_cheaper():
    result = {"answer": "sunny", "temperature": 21.5, "tags": ["a", "b"]}
    m = msg(result_part(result=result), role="tool")
    text = '{\n  "answer": "sunny",\n  "temperature": 21.5,\n  "tags": [\n    "a",\n    "b"\n  ]\n}'
    assert count_message(m, TOKENX) == expected("lookup", text, role="tool", overhead=7.6 - 12)


def test_model_output_is_preferred_over_the_raw_result():
    raw = {"longPayload": [f"entry-{i}-{'very-large-result-' * 5}" for i in range(200)]}
    output = {"type": "text", "value": "sunny, 72°F (200 entries summarized)"}
    plain = msg(result_part(result=raw), role="tool")
    summarized = msg(result_part(result=raw, providerMetadata={"mastra": {"modelOutput": output}}), role="tool")
    assert count_message(summarized, TOKENX) == expected("lookup", js_json(output, indent=2), role="tool",
                                                         overhead=7.6 - 12)
    assert count_message(summarized, TOKENX) < count_message(plain, TOKENX)


def test_empty_result_counts_a_placeholder():
    for empty in ({}, {"result": None}, {"result": ""}):
        assert count_message(msg(result_part(**empty), role="tool"), TOKENX) == expected(
            "lookup", "[empty result]", role="tool", overhead=7.6)


def test_error_counts_its_text_or_the_default():
    boom = msg(result_part(isError=True, error="boom: disk full"), role="tool")
    assert count_message(boom, TOKENX) == expected("lookup", "boom: disk full", role="tool", overhead=7.6)
    silent = msg(result_part(isError=True), role="tool")
    assert count_message(silent, TOKENX) == expected("lookup", "Tool execution failed", role="tool", overhead=7.6)


def test_denial_counts_its_reason_or_the_default():
    denied = msg(result_part(denied=True), role="tool")
    assert count_message(denied, TOKENX) == expected(
        "lookup", "Tool call was not approved by the user", role="tool", overhead=7.6)
    reason = msg(result_part(denied=True, error="not on prod"), role="tool")
    assert count_message(reason, TOKENX) == expected("lookup", "not on prod", role="tool", overhead=7.6)


def test_multimodal_content_is_counted_block_by_block():
    m = msg(result_part(content=[{"type": "text", "text": "screenshot taken"}, image()]), role="tool")
    assert count_message(m, TOKENX) == expected("lookup", "screenshot taken", 85, role="tool", overhead=7.6 - 12)
    output = {"type": "content", "value": [{"type": "text", "text": "here"},
                                           {"type": "image-data", "data": "a" * 2_000_000, "mediaType": "image/png"},
                                           {"type": "custom", "n": 1}]}
    m = msg(result_part(providerMetadata={"mastra": {"modelOutput": output}}), role="tool",
            metadata={"provider": "openai", "model": "gpt-4o"})
    assert count_message(m, TOKENX) == expected("lookup", "here", 765, js_json({"type": "custom", "n": 1}, indent=2),
                                                role="tool", overhead=7.6 - 12)


def test_long_encrypted_content_is_stripped_before_counting():
    secret = "x" * 1000
    result = {"items": [{"encryptedContent": secret, "id": 1}], "encryptedContent": "short"}
    m = msg(result_part(result=result), role="tool")
    text = js_json({"items": [{"encryptedContent": "[stripped encryptedContent: 1000 characters]", "id": 1}],
                    "encryptedContent": "short"}, indent=2)
    assert count_message(m, TOKENX) == expected("lookup", text, role="tool", overhead=7.6 - 12)


def test_reasoning_and_data_parts_count_zero_under_both_counters():
    for counter in (TOKENX, get_counter("tiktoken")):
        plain = msg({"type": "text", "text": "hello there"})
        noisy = msg({"type": "text", "text": "hello there"}, {"type": "reasoning", "text": "long thoughts " * 50},
                    {"type": "data-om-status", "data": {"windows": {"active": 1}}})
        assert count_message(noisy, counter) == count_message(plain, counter)


def test_both_counters_use_the_same_part_rules():
    tiktoken = get_counter("tiktoken")
    parts = [image(width=2048, height=1024), {"type": "file", "data": "a" * 4000, "mimeType": "application/pdf"}]
    for part in parts:
        m = msg(part)
        fixed = {c.name: count_message(m, c, "openai/gpt-4o") - c.count("assistant") for c in (TOKENX, tiktoken)}
        assert len(set(fixed.values())) == 1
    call = msg({"type": "tool-call", "toolCallId": "c", "toolName": "search", "args": {"q": "lyon"}})
    assert count_message(call, tiktoken) == expected("search", '{"q":"lyon"}', overhead=3.8 - 12, counter=tiktoken)
    assert count_message(call, tiktoken) == count_message(call, tiktoken)


def test_counts_never_go_negative():
    m = msg({"type": "tool-call", "toolCallId": "c", "toolName": "x", "args": {}})
    assert count_message(m, TOKENX) == 0
