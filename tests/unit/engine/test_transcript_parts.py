"""The observer transcript of messages with parts (spec §7.2)."""

from datetime import timedelta

from omstream.engine.fold import fold, new_state
from omstream.engine.prompting.transcript import (
    AttachmentNumbers,
    TranscriptLine,
    message_lines,
    observer_transcript,
    outline_arguments,
    render_transcript,
    truncate_to_tokens,
)
from omstream.engine.rules.tokens import get_counter, js_json
from omstream.engine.state import PendingMessage
from omstream.schemas.messages import Message
from tests.helpers import T0, engine, message

COUNT = get_counter("tokenx").count


def msg(*parts, role="assistant", i=0):
    return Message.model_validate({"id": f"m{i}", "threadId": "t1", "role": role, "content": list(parts),
                                   "createdAt": (T0 + timedelta(minutes=i)).isoformat()})


def lines(*parts, role="assistant"):
    return message_lines(msg(*parts, role=role), COUNT)


def render(*messages):
    """The transcript of one observer call over these messages."""
    pending = tuple(PendingMessage(id=m.id, role=m.role, created_at=m.created_at, text=m.text(), tokens=0,
                                   lines=message_lines(m, COUNT)) for m in messages)
    return observer_transcript(pending, "UTC")


def call(name="search", args=None):
    return {"type": "tool-call", "toolCallId": "c", "toolName": name, "args": {"q": "lyon"} if args is None else args}


def result(name="search", **fields):
    return {"type": "tool-result", "toolCallId": "c", "toolName": name, **fields}


# --- titles -----------------------------------------------------------------------------------
def test_text_parts_are_titled_by_role_one_line_each():
    assert lines({"type": "text", "text": "hi"}, {"type": "text", "text": "there"}, role="user") == (
        ("User", "hi"), ("User", "there"))
    assert render(msg({"type": "text", "text": "hello"})) == "Mar 3 2025:\nAssistant (9:00 AM): hello"


def test_reasoning_is_titled_reasoning_and_data_parts_are_left_out():
    assert lines({"type": "reasoning", "text": "thinking"}, {"type": "data-om-status", "data": {}},
                 {"type": "text", "text": "done"}) == (("Reasoning", "thinking"), ("Assistant", "done"))
    assert lines({"type": "data-om-status", "data": {}}) == ()


def test_tool_call_shows_the_argument_outline():
    assert lines(call(args={"q": "lyon", "limit": 3})) == (("Tool Call search", 'q: "lyon"\nlimit: 3'),)
    assert lines(call(args="")) == (("Tool Call search", "[arguments unavailable]"),)
    assert lines(call(args='{"q": "paris"}')) == (("Tool Call search", 'q: "paris"'),)  # JSON text: outlined
    assert lines(call(args="plain words")) == (("Tool Call search", '"plain words"'),)


def test_tool_result_shows_the_serialized_result():
    assert lines(result(result={"hits": 3}), role="tool") == (("Tool Result search", '{\n  "hits": 3\n}'),)
    assert lines(result(result="three hits"), role="tool") == (("Tool Result search", "three hits"),)
    assert lines(result(), role="tool") == (("Tool Result search", "[empty result]"),)


def test_tool_result_prefers_the_model_output():
    part = result(result={"raw": "x" * 500}, providerMetadata={"mastra": {"modelOutput": "short summary"}})
    assert lines(part, role="tool") == (("Tool Result search", "short summary"),)


def test_tool_error_and_denial_titles():
    assert lines(result(isError=True, error="boom"), role="tool") == (("Tool Error search", "boom"),)
    assert lines(result(isError=True), role="tool") == (("Tool Error search", "Tool execution failed"),)
    assert lines(result(denied=True), role="tool") == (
        ("Tool Denied search", "Tool call was not approved by the user"),)
    assert lines(result(denied=True, error="not on prod"), role="tool") == (("Tool Denied search", "not on prod"),)


def test_a_whole_exchange_renders_in_order():
    text = render(msg({"type": "text", "text": "weather in lyon?"}, role="user", i=0),
                  msg(call(), i=1), msg(result(result="sunny"), role="tool", i=1))
    assert text == ("Mar 3 2025:\nUser (9:00 AM): weather in lyon?\nTool Call search (9:01 AM): q: \"lyon\"\n"
                    "Tool Result search: sunny")


# --- attachments ------------------------------------------------------------------------------
def test_attachment_placeholders_are_numbered_per_call_images_and_files_apart():
    first = msg({"type": "image", "image": "https://x/img/cat%20one.png"},
                {"type": "file", "url": "https://x/a.pdf", "mimeType": "application/pdf", "filename": " plan.pdf "},
                {"type": "image", "image": "aGVsbG8gd29ybGQh", "mimeType": "image/jpeg"}, i=0)
    second = msg({"type": "file", "data": "aGk=", "mimeType": "text/plain"},
                 {"type": "file", "url": "https://x/shot.webp", "mimeType": "application/octet-stream"},
                 {"type": "image", "image": "aGVsbG8gd29ybGQh"}, i=1)
    assert render(first, second) == (
        "Mar 3 2025:\n"
        "Image (9:00 AM): [Image #1: cat one.png]\n"
        "File: [File #1: plan.pdf]\n"
        "Image: [Image #2: image/jpeg]\n"
        "File (9:01 AM): [File #2: text/plain]\n"
        "File: [Image #3: shot.webp]\n"  # an image-like file counts as an image
        "Image: [Image #4]"
    )
    assert "[Image #1: shot.webp]" in render(second)  # every observer call starts again at 1


def test_tool_result_attachments_become_placeholders_in_the_json():
    part = result(content=[{"type": "text", "text": "captured"},
                           {"type": "image", "image": "aGk=", "filename": 'the "shot".png'}])
    body = render(msg({"type": "image", "image": "https://x/before.png"}), msg(part, role="tool", i=1))
    assert body.endswith(js_json([{"type": "text", "text": "captured"},
                                  {"type": "image", "placeholder": '[Image #2: the "shot".png]'}], indent=2))
    output = {"type": "content", "value": [{"type": "media", "data": "aGk=", "mediaType": "application/pdf"},
                                           {"type": "image-url", "url": "https://x/p/chart.png"}]}
    part = result(providerMetadata={"mastra": {"modelOutput": output}})
    (title, body), = message_lines(msg(part, role="tool"), COUNT)
    numbered = AttachmentNumbers().fill(title, body)
    assert '"placeholder": "[File #1: application/pdf]"' in numbered
    assert '"placeholder": "[Image #1: chart.png]"' in numbered


def test_marks_are_only_numbered_on_attachment_and_tool_result_lines():
    numbers = AttachmentNumbers()
    mark = "\ue000I\ue001x\ue002"
    assert numbers.fill("User", mark) == mark
    assert numbers.fill("Image", mark) == "[Image #1: x]"


# --- truncation -------------------------------------------------------------------------------
def test_long_tool_results_are_cut_to_5000_tokens():
    long = " ".join(f"word{i}" for i in range(20_000))
    (title, body), = lines(result(result=long), role="tool")
    assert title == "Tool Result search" and COUNT(body) <= 5000
    visible, marker = body.rsplit("\n... [truncated ~", 1)
    assert long.startswith(visible) and marker == f"{COUNT(long) - COUNT(visible)} tokens]"
    assert COUNT(body) > 4900  # the longest prefix that fits


def test_truncation_keeps_short_text_and_uses_the_given_counter():
    assert truncate_to_tokens("short", 10, COUNT) == "short"
    tiktoken = get_counter("tiktoken").count
    cut = truncate_to_tokens("alpha beta gamma " * 100, 20, tiktoken)
    assert tiktoken(cut) <= 20 and "[truncated ~" in cut


# --- argument outline -------------------------------------------------------------------------
def test_outline_is_breadth_first_with_paths():
    text = outline_arguments({"request": {"edits": [{"old": "before", "new": "after"}], "path": "src/f.ts"},
                              "dryRun": False, "odd key": None, "empty": {}, "none": []}, COUNT)
    assert text.split("\n") == [
        "request: <object>", "dryRun: false", '["odd key"]: null', "empty: <object>", "none: <array, 0 items>",
        "request.edits: <array, 1 item>", 'request.path: "src/f.ts"', "empty: [empty object]",
        "none: [empty array]", "request.edits[0]: <object>", 'request.edits[0].old: "before"',
        'request.edits[0].new: "after"',
    ]


def test_outline_limits_depth_entries_and_lines():
    deep = {"a": {"b": {"c": {"d": {"e": {"f": {"g": 1}}}}}}}
    assert "a.b.c.d.e.f: <object> [max depth reached]" in outline_arguments(deep, COUNT)
    wide = outline_arguments({"items": list(range(30))}, COUNT)
    assert "items: ... [additional entries omitted]" in wide and "items[19]: 19" in wide and "items[20]" not in wide
    many = outline_arguments({f"k{i}": {f"j{j}": j for j in range(20)} for i in range(20)}, COUNT)
    assert len(many.split("\n")) == 101 and many.endswith("[additional nested entries omitted by structure limit]")


def test_long_strings_are_previewed_after_the_outline():
    content = "export const value = 1;\n" * 2000
    text = outline_arguments({"content": content, "path": "src/gen.ts", "overwrite": True}, COUNT)
    assert text.startswith(f"content: <string, {len(content)} characters; preview size-limited>\n"
                           'path: "src/gen.ts"\noverwrite: true\nLarge string previews (size-limited):\n'
                           "content:\n  | export const value = 1;")
    assert "characters omitted]" in text and COUNT(text) <= 2000
    root = outline_arguments("x" * 1000, COUNT)
    assert root.startswith("<string, 1000 characters; preview size-limited>\npreview:\n  | xxx")


def test_outline_fits_a_small_budget_keeping_concise_fields():
    text = outline_arguments({"items": [f"item-{i}" for i in range(30)], "payload": "x" * 20_000,
                              "trailing": "still-visible"}, COUNT, max_tokens=100)
    assert 'trailing: "still-visible"' in text and "fields omitted by size limit" in text
    assert COUNT(text) <= 100


# --- through the fold -------------------------------------------------------------------------
def test_text_only_messages_keep_their_single_line():
    config = engine(5000)
    state = new_state("thread:t1", "t1", "u1")
    for i in range(2):
        state = fold(state, message(i), config).state
    assert all(p.lines is None for p in state.pending)
    expected = render_transcript(TranscriptLine(p.created_at, p.role.capitalize(), p.text) for p in state.pending)
    assert observer_transcript(state.pending, "UTC") == expected


def test_the_fold_stores_part_lines_and_counts_attachments_for_the_observer_model():
    config = engine(5000)
    m = msg({"type": "text", "text": "look"}, {"type": "image", "image": "https://x/cat.png"}, role="user")
    state = fold(new_state("thread:t1", "t1", "u1"), m, config).state
    (pending,) = state.pending
    assert pending.lines == (("User", "look"), ("Image", "\ue000I\ue001cat.png\ue002"))
    assert observer_transcript(state.pending, "UTC") == "Mar 3 2025:\nUser (9:00 AM): look\nImage: [Image #1: cat.png]"
    # the scripted observer model names no provider: the OpenAI-style fallback, 85 for a URL image
    assert pending.tokens == round(COUNT("user") + COUNT("look") + 85 + 3.8)
    state = PendingMessage.model_validate_json(pending.model_dump_json())
    assert state.lines == pending.lines  # survives the state table's JSON
