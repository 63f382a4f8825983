"""Attachments the Observer sees (spec §2 `observeAttachments`, §7.2): placeholders always, the
images and files themselves as litellm content parts when the policy lets them through.

The token counts of images and files (spec §5.3, its test-verified values) are in
`test_tokens.py`; forwarding does not change them.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from datetime import timedelta

import orjson
import pytest

from omstream.engine.prompting.observer_attachments import (
    FORWARD_LIMIT,
    Attachment,
    attachment_of,
    content_part,
    forwarded_attachments,
    mime_allowed,
    observer_user_content,
)
from omstream.engine.prompting.transcript import transcribe
from omstream.engine.rules.tokens import get_counter
from omstream.engine.state import PendingMessage
from omstream.engine.step import EngineConfig
from omstream.models import capabilities, scripted
from omstream.models.calls import run_job, without_attachments
from omstream.projections.views.chat import attachment_part
from omstream.schemas.config import check_om_config
from omstream.schemas.control import ObserveRequested
from omstream.schemas.jobs import ChatMessage, ModelJob, request_hash
from omstream.schemas.messages import Message
from tests.helpers import T0, engine, fold_inputs, text_of
from tests.unit.schemas.test_json_schema import pydantic_accepts, validator

COUNT = get_counter("tokenx").count
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoK"

CAT = {"type": "image", "image": "https://x.test/cat.png"}
PLAN = {"type": "file", "data": PDF, "mimeType": "application/pdf", "filename": "plan.pdf"}
NOTES = {"type": "file", "url": "https://x.test/notes.txt", "mimeType": "text/plain"}
SHOT = {"type": "file", "data": PNG, "mimeType": "image/png", "filename": "shot.png"}  # image-like file
CAT_PART = {"type": "image_url", "image_url": {"url": "https://x.test/cat.png"}}
PLAN_PART = {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "plan.pdf"}}
NOTES_PART = {"type": "file", "file": {"file_id": "https://x.test/notes.txt", "format": "text/plain"}}
SHOT_PART = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}


def msg(i: int, *parts, role: str = "user") -> Message:
    return Message.model_validate({"id": f"m{i}", "threadId": "t1", "role": role, "content": list(parts),
                                   "createdAt": (T0 + timedelta(minutes=i)).isoformat()})


def text(words: int = 40, seed: int = 0) -> dict:
    return {"type": "text", "text": text_of(words, seed)}


def observer_job(*messages: Message, model: str = "scripted/observer", **observation) -> ModelJob:
    """The observer job of `om observe` after `messages` (no threshold is reached before)."""
    config = engine(100_000, observation={"model": model, **observation})
    request = ObserveRequested(thread_id="t1", at=messages[-1].created_at + timedelta(seconds=1))
    _, _, jobs, rejected = fold_inputs([*messages, request], config)
    assert not rejected
    (job,) = jobs
    assert job.kind == "observe"
    return job


def user_content(job: ModelJob):
    (user,) = [m for m in job.messages if m.role == "user"]
    return [p.model_dump(exclude_none=True) for p in user.content] if isinstance(user.content, tuple) else user.content


CONVERSATION = (
    msg(0, text(seed=1), CAT, PLAN),
    msg(1, text(seed=2), role="assistant"),
    msg(2, text(seed=3), NOTES, SHOT),
)


# --- the transcript -------------------------------------------------------------------------
def test_an_image_bearing_conversation_names_its_attachments_in_the_transcript():
    content = user_content(observer_job(*CONVERSATION, observeAttachments=False))
    assert isinstance(content, str)
    history = content.split("## New Message History to Observe", 1)[1]
    assert "Image: [Image #1: cat.png]\nFile: [File #1: plan.pdf]" in history
    assert "File: [File #2: notes.txt]\nFile: [Image #2: shot.png]" in history  # image-like: an image


def test_pending_messages_keep_their_attachments_in_placeholder_order():
    view = transcribe(CONVERSATION[0], COUNT)
    assert [title for title, _ in view.lines] == ["User", "Image", "File"]
    assert view.attachments == (
        Attachment(kind="image", url="https://x.test/cat.png", mime_type="image/png", label="cat.png"),
        Attachment(kind="file", url=f"data:application/pdf;base64,{PDF}", mime_type="application/pdf",
                   label="plan.pdf", filename="plan.pdf"),
    )
    assert transcribe(msg(9, text()), COUNT).attachments == ()
    plain = Message(id="m", thread_id="t1", role="user", content="hi", created_at=T0)
    assert transcribe(plain, COUNT) == (None, ())


# --- true / false ---------------------------------------------------------------------------
def test_true_forwards_every_attachment_after_the_text_each_named_by_its_placeholder():
    forwarded = user_content(observer_job(*CONVERSATION))  # true is the default
    assert forwarded[1:] == [
        {"type": "text", "text": "[Image #1: cat.png]"}, CAT_PART,
        {"type": "text", "text": "[File #1: plan.pdf]"}, PLAN_PART,
        {"type": "text", "text": "[File #2: notes.txt]"}, NOTES_PART,
        {"type": "text", "text": "[Image #2: shot.png]"}, SHOT_PART,
    ]
    # the text is the very prompt a request without attachments has: placeholders always kept
    plain = user_content(observer_job(*CONVERSATION, observeAttachments=False))
    assert forwarded[0] == {"type": "text", "text": plain}


def test_false_forwards_nothing_and_the_request_hashes_as_a_text_request():
    job = observer_job(*CONVERSATION, observeAttachments=False)
    assert all(isinstance(m.content, str) for m in job.messages)
    assert job.request_hash == request_hash(job.model, job.messages, job.settings,
                                            provider_options=job.provider_options, fallbacks=job.fallbacks)
    texts_only = (msg(0, text(seed=1)), msg(1, text(seed=2), role="assistant"), msg(2, text(seed=3)))
    assert all(isinstance(m.content, str) for m in observer_job(*texts_only).messages)  # nothing to send


def test_requests_with_string_content_hash_as_before():
    # The hash an earlier build gave this request (schemas/jobs.py before content parts).
    messages = [ChatMessage(role="system", content="s"), ChatMessage(role="user", content="u")]
    assert request_hash("scripted/observer", messages, {"temperature": 0.3}, provider_options={"google": {"a": 1}},
                        fallbacks=["b"], sample=1) == "24e335badc046fb7c5288087a864ce9977860427e374575dc1a2eff81dc9ae2a"


# --- allow-lists ----------------------------------------------------------------------------
@pytest.mark.parametrize(("patterns", "expected"), [
    (["image/*"], ["[Image #1: cat.png]", "[Image #2: shot.png]"]),
    (["application/pdf"], ["[File #1: plan.pdf]"]),
    (["APPLICATION/PDF", "Text/Plain"], ["[File #1: plan.pdf]", "[File #2: notes.txt]"]),
    (["*"], ["[Image #1: cat.png]", "[File #1: plan.pdf]", "[File #2: notes.txt]", "[Image #2: shot.png]"]),
    (["image/png"], ["[Image #1: cat.png]", "[Image #2: shot.png]"]),  # cat.png: read from its URL
    (["video/*"], []),
    ([], []),
])
def test_an_allow_list_forwards_what_matches(patterns, expected):
    content = user_content(observer_job(*CONVERSATION, observeAttachments=patterns))
    names = [p["text"] for p in content[1::2]] if isinstance(content, list) else []
    assert names == expected


def test_mime_patterns_are_case_insensitive_exact_wildcard_or_everything():
    assert mime_allowed(["image/*"], "IMAGE/JPEG")
    assert mime_allowed(["Image/*"], "image/webp")
    assert mime_allowed(["application/pdf"], "Application/PDF; name=a.pdf")
    assert not mime_allowed(["application/pdf"], "application/pdfx")
    assert not mime_allowed(["image/*"], "application/pdf")
    assert mime_allowed(["*"], None) and mime_allowed(["*"], "x/y")
    assert mime_allowed(["image/*"], None, "image")  # an image of unknown type is still an image
    assert not mime_allowed(["image/png"], None, "image")
    assert not mime_allowed(["application/*"], None, "file")


# --- auto -----------------------------------------------------------------------------------
def test_auto_forwards_to_a_multimodal_scripted_model_and_not_to_a_text_only_one():
    vision = user_content(observer_job(*CONVERSATION, model="scripted/observer-vision", observeAttachments="auto"))
    assert isinstance(vision, list) and len(vision) == 9
    text_only = user_content(observer_job(*CONVERSATION, model="scripted/observer", observeAttachments="auto"))
    assert text_only == vision[0]["text"]
    assert scripted.takes_attachments("scripted/observer-vision") is True
    assert scripted.takes_attachments("scripted/observer-b") is False
    assert scripted.takes_attachments("scripted/painter") is None


@pytest.mark.parametrize(("model", "takes"), [
    ("openai/gpt-4o", True),                  # supports_vision: true
    ("google/gemini-2.5-flash", True),        # the original's name, read as gemini/...
    ("openai/o3-mini", False),                # supports_vision: false
    ("deepseek/deepseek-chat", False),        # in the table, no vision declared: text only
    ("nobody/unknown-model-7", None),         # not in the table: unknown
    ("local/qwen2.5-1.5b", False),            # the shipped offline model is text-only
])
def test_auto_reads_the_capability_tables(model, takes):
    assert capabilities.takes_attachments(model) is takes


def test_the_engine_asks_the_capability_its_config_was_given():
    """The edge passes the model tables (`EngineConfig.takes_attachments`); a config built
    without them treats every model as unknown, and an unknown model is forwarded attachments."""
    asked: list[str] = []

    def text_only(model: str) -> bool | None:
        asked.append(model)
        return False

    given = engine(100_000, observation={"model": "scripted/observer-vision", "observeAttachments": "auto"})
    request = ObserveRequested(thread_id="t1", at=CONVERSATION[-1].created_at + timedelta(seconds=1))
    jobs = fold_inputs([*CONVERSATION, request], replace(given, takes_attachments=text_only))[2]
    assert asked == ["scripted/observer-vision"] and isinstance(user_content(jobs[0]), str)
    bare = EngineConfig(given.om)
    assert isinstance(user_content(fold_inputs([*CONVERSATION, request], bare)[2][0]), list)


def test_auto_forwards_when_the_model_is_unknown_or_the_lookup_fails():
    pending = _pending(CONVERSATION)
    tables = capabilities.takes_attachments
    assert observer_user_content("t", pending, "auto", "nobody/unknown-model-7", capability=tables) != "t"
    assert observer_user_content("t", pending, "auto", "openai/o3-mini", capability=tables) == "t"
    assert observer_user_content("t", pending, "auto", "openai/gpt-4o", capability=tables) != "t"
    # Without a model table (the engine reads none itself) every model is unknown: forwarded.
    assert observer_user_content("t", pending, "auto", "openai/o3-mini") != "t"

    def failing(model: str) -> bool | None:
        raise AssertionError("a request without attachments needs no capability")

    assert observer_user_content("t", _pending([msg(0, text())]), "auto", "x/y", capability=failing) == "t"


def test_the_litellm_answer_is_looked_up_once_per_model_name():
    capabilities.litellm_vision("openai/gpt-4o")
    hits = capabilities.litellm_vision.cache_info().hits
    for _ in range(3):
        assert capabilities.takes_attachments("openai/gpt-4o") is True
    assert capabilities.litellm_vision.cache_info().hits == hits + 3


def test_every_observe_attachments_setting_is_accepted():
    for value in (True, False, "auto", ["image/*", "application/pdf"], ["*"]):
        assert check_om_config({"observation": {"observeAttachments": value}}) == ()


# --- tool results ---------------------------------------------------------------------------
def _tool_exchange(*blocks, **fields) -> tuple[Message, Message]:
    call = {"type": "tool-call", "toolCallId": "c1", "toolName": "shot", "args": {}}
    result = {"type": "tool-result", "toolCallId": "c1", "toolName": "shot", "content": list(blocks), **fields}
    return msg(0, text(seed=4), call, role="assistant"), msg(1, result, text(seed=5), role="tool")


def test_tool_result_attachments_are_filtered_by_the_same_rule():
    blocks = ({"type": "text", "text": "captured"}, {"type": "image", "image": PNG, "mimeType": "image/png"},
              {"type": "file", "data": PDF, "mimeType": "application/pdf", "filename": "page.pdf"})
    exchange = _tool_exchange(*blocks)
    everything = user_content(observer_job(*exchange))
    assert everything[1:] == [
        {"type": "text", "text": "[Image #1: image/png]"}, SHOT_PART,
        {"type": "text", "text": "[File #1: page.pdf]"},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "page.pdf"}},
    ]
    assert '"placeholder": "[Image #1: image/png]"' in everything[0]["text"]
    pdf_only = user_content(observer_job(*exchange, observeAttachments=["application/pdf"]))
    assert [p["text"] for p in pdf_only[1::2]] == ["[File #1: page.pdf]"]
    assert isinstance(user_content(observer_job(*exchange, observeAttachments=False)), str)
    # lifted from a modelOutput too, and from a failed tool's result (numbered there as well)
    output = {"type": "content", "value": [{"type": "media", "data": PNG, "mediaType": "image/png"}]}
    failed = _tool_exchange(isError=True, providerMetadata={"mastra": {"modelOutput": output}})
    content = user_content(observer_job(*failed, observeAttachments=["image/*"]))
    assert content[1:] == [{"type": "text", "text": "[Image #1: image/png]"}, SHOT_PART]
    assert "Tool Error shot" in content[0]["text"] and "\ue000" not in content[0]["text"]


def test_a_truncated_tool_result_forwards_only_the_attachments_it_still_names():
    long = " ".join(f"word{i}" for i in range(20_000))
    (_, result) = _tool_exchange({"type": "image", "image": "https://x.test/before.png"},
                                 {"type": "text", "text": long},
                                 {"type": "image", "image": "https://x.test/after.png"})
    view = transcribe(result, COUNT)
    assert "[truncated ~" in view.lines[0][1]
    assert [a.label for a in view.attachments] == ["before.png"]


# --- size -----------------------------------------------------------------------------------
def test_inline_attachments_beyond_the_request_budget_stay_placeholders():
    big = "A" * 300_000  # 300 kB of base64 each
    messages = [msg(i, text(seed=i), {"type": "file", "data": big, "mimeType": "application/pdf",
                                      "filename": f"big{i}.pdf"}) for i in range(3)]
    messages.append(msg(3, text(seed=3), PLAN))
    chosen = forwarded_attachments(_pending(messages), True, "scripted/observer")
    assert [name for name, _ in chosen] == ["[File #1: big0.pdf]", "[File #2: big1.pdf]", "[File #4: plan.pdf]"]
    content = observer_user_content("x" * 100_000, _pending(messages), True, "scripted/observer")
    assert [p["text"] for p in content[1::2]] == ["[File #1: big0.pdf]", "[File #4: plan.pdf]"]
    assert len(orjson.dumps(content)) < FORWARD_LIMIT


# --- the wire -------------------------------------------------------------------------------
def test_a_job_with_content_parts_matches_its_json_schema_and_round_trips():
    job = observer_job(*CONVERSATION)
    sample = orjson.loads(orjson.dumps(job.wire()))
    assert not [e.message for e in validator("model-job.json").iter_errors(sample)]
    assert pydantic_accepts("model-job.json", sample)
    assert ModelJob.model_validate_json(orjson.dumps(sample)) == job
    wrong = {**sample, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}
    assert validator("model-job.json").iter_errors(wrong) and not pydantic_accepts("model-job.json", wrong)


def test_attachments_survive_the_state_store_encoding():
    (pending,) = _pending([CONVERSATION[0]])
    assert PendingMessage.model_validate_json(pending.model_dump_json()) == pending
    old = orjson.loads(pending.model_dump_json())
    del old["attachments"]  # a pending message stored before attachments were kept
    assert PendingMessage.model_validate(old).attachments == ()


def test_the_chat_projection_and_the_observer_send_an_attachment_alike():
    parts = (CAT, PLAN, NOTES, SHOT)
    expected = [CAT_PART, PLAN_PART, NOTES_PART, SHOT_PART]
    assert [content_part(attachment_of(p)) for p in parts] == expected
    assert [attachment_part(p) for p in parts] == expected


# --- the model agent ------------------------------------------------------------------------
def _run(job: ModelJob):
    return asyncio.run(run_job(job, rng=random.Random(7), sleep=_no_sleep))


async def _no_sleep(seconds: float) -> None:
    return None


def _job_for(model: str, settings: dict | None = None) -> ModelJob:
    job = observer_job(*CONVERSATION)
    settings = settings or {}
    return job.model_copy(update={"model": model, "settings": settings, "request_hash": request_hash(
        model, job.messages, settings)})


def test_the_scripted_vision_observer_reports_what_it_received_through_litellm():
    result = _run(_job_for("scripted/observer-vision"))
    assert result.ok, result.error
    seen = [line.split("Attachment received: ", 1)[1] for line in result.output.splitlines()
            if "Attachment received: " in line]
    assert seen == [
        "[Image #1: cat.png] image_url https://x.test/cat.png",
        f"[File #1: plan.pdf] file data:application/pdf;base64 ({len(PLAN_PART['file']['file_data'])} characters)",
        "[File #2: notes.txt] file https://x.test/notes.txt",
        f"[Image #2: shot.png] image_url data:image/png;base64 ({len(SHOT_PART['image_url']['url'])} characters)",
    ]
    # a text-only scripted observer reads the same text and answers as without attachments
    text_only = _run(_job_for("scripted/observer"))
    plain = observer_job(*CONVERSATION, observeAttachments=False)
    assert text_only.output == _run(plain).output and "Attachment received" not in text_only.output


def test_a_request_refused_with_its_attachments_is_asked_again_without_them():
    scripted.reset_failures()
    # Refused while a part names an attachment (a text part of its own starts a line; in the
    # transcript the placeholder follows its line's title): as a provider refusing the image.
    settings = {"failWith": "400", "failOnly": {"400": "\n[Image #1: cat.png]"}}
    result = _run(_job_for("scripted/observer-vision", settings))
    scripted.reset_failures()
    assert result.ok and result.attempts == 2
    assert "Attachment received" not in result.output
    assert result.provider_metadata["omstream"]["attachmentsDropped"].startswith("BadRequestError")


def test_without_attachments_leaves_the_text_alone():
    messages = [{"role": "system", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "prompt"}, {"type": "text", "text": "[Image #1]"},
                                             CAT_PART, {"type": "text", "text": "[File #1]"}, PLAN_PART]}]
    assert without_attachments(messages) == [{"role": "system", "content": "s"}, {"role": "user", "content": "prompt"}]
    assert without_attachments([{"role": "user", "content": "prompt"}]) is None


# --- helpers --------------------------------------------------------------------------------
def _pending(messages) -> tuple[PendingMessage, ...]:
    out = []
    for m in messages:
        view = transcribe(m, COUNT)
        out.append(PendingMessage(id=m.id, role=m.role, created_at=m.created_at, text=m.text(), tokens=0,
                                  lines=view.lines, attachments=view.attachments))
    return tuple(out)
