"""The exported JSON Schema files: fresh, faithful to the product's documented fields, and in
agreement with the pydantic models on what is valid and what is not."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from omstream.cli import main
from omstream.schemas.base import SCHEMA_VERSION
from omstream.schemas.codec import INPUT_TYPES, DecodeFailure, decode_event, decode_input, decode_job
from omstream.schemas.dead_letters import DeadLetter
from omstream.schemas.events import EVENT_TYPES, EventEnvelope
from omstream.schemas.jobs import ModelJob, ModelResult
from omstream.schemas.jsonschema import DEFAULT_DIR, INDEX, export_schemas, render_schemas
from omstream.schemas.messages import Message
from omstream.schemas.parts import DataPart
from tests.unit.schemas.test_wire_roundtrip import CONTROL_CLASSES, wire_instances

T = "2025-03-03T09:00:00Z"
CONFIG = {"messageTokens": 30000, "observationTokens": 40000, "scope": "thread"}
ENVELOPE = {"eventId": "e1", "memoryKey": "thread:t1", "threadId": "t1", "seq": 1, "schemaVersion": 1,
            "eventTime": T}


@cache
def validator(file: str) -> Draft202012Validator:
    schema = json.loads((DEFAULT_DIR / file).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def file_of(cls: type) -> str:
    if cls is Message:
        return "message.json"
    if cls is ModelJob:
        return "model-job.json"
    if cls is ModelResult:
        return "model-result.json"
    return f"{cls.model_fields['type'].default}.json"


def union_of(cls: type) -> str | None:
    if cls in CONTROL_CLASSES:
        return "control.json"
    return "event.json" if issubclass(cls, EventEnvelope) else None


def pydantic_accepts(file: str, sample: dict[str, Any]) -> bool:
    raw = orjson.dumps(sample)
    try:
        if file == "model-job.json":
            decode_job(raw)
        elif file == "data-part.json":
            DataPart.model_validate_json(raw)
        elif file == "dead-letter.json":
            DeadLetter.model_validate_json(raw)
        elif file == "event.json" or file.startswith(("data-om-", "om-")):
            decoded = decode_event(raw)
            assert file == "event.json" or decoded.type == file.removesuffix(".json")
        else:
            decoded = decode_input(raw)
            if isinstance(decoded, DecodeFailure):
                return False
            if file not in ("message.json", "control.json"):
                assert decoded.type == file.removesuffix(".json")
    except ValidationError:
        return False
    return True


# --- freshness --------------------------------------------------------------------------------
def test_committed_schemas_match_a_fresh_export() -> None:
    result = export_schemas(check=True)
    assert not result.stale, (
        f"schemas/json is stale (new {result.added}, changed {result.changed}, removed {result.removed}): "
        "run `om schema export`"
    )


def test_index_lists_every_file_and_every_wire_type() -> None:
    index = json.loads((DEFAULT_DIR / INDEX).read_text(encoding="utf-8"))
    files = {entry["file"] for entry in index["schemas"]}
    assert files | {INDEX} == set(render_schemas())
    covered = {t for entry in index["schemas"] if "topic" in entry for t in entry["types"]}
    assert covered == INPUT_TYPES | set(EVENT_TYPES) | {"model-job", "dead-letter"}
    # The one schema of no topic: the feed's frame, whose types are the events' part types.
    [part] = [entry for entry in index["schemas"] if "topic" not in entry]
    assert part["file"] == "data-part.json" and part["route"].startswith("GET /threads/{threadId}/events")
    assert set(part["types"]) == {t if t.startswith("data-") else f"data-{t}" for t in EVENT_TYPES}
    for entry in index["schemas"]:
        schema = json.loads((DEFAULT_DIR / entry["file"]).read_text(encoding="utf-8"))
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"] == entry["id"] and schema["title"] == entry["title"]


def test_export_reports_changes_and_check_fails_on_stale_files(tmp_path, capsys) -> None:
    assert main(["schema", "export", "--out", str(tmp_path)]) == 0
    assert f"{len(render_schemas())} new" in capsys.readouterr().out
    assert main(["schema", "export", "--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "message.json").write_text("{}\n")
    (tmp_path / "notes.json").write_text("{}\n")  # not ours: never touched
    index = json.loads((tmp_path / INDEX).read_text())
    index["schemas"].append({"file": "data-om-retired.json"})
    (tmp_path / INDEX).write_text(json.dumps(index))
    (tmp_path / "data-om-retired.json").write_text("{}\n")
    assert main(["schema", "export", "--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "changed  message.json" in err and "removed  data-om-retired.json" in err
    assert "run `om schema export`" in err
    assert main(["schema", "export", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "data-om-retired.json").exists() and (tmp_path / "notes.json").exists()
    assert main(["schema", "export", "--out", str(tmp_path), "--check"]) == 0


def _undescribed(node: Any, path: str) -> list[str]:
    """The paths of the properties under `node` (nested objects and `$defs` included) that have
    no description."""
    missing: list[str] = []
    if isinstance(node, dict):
        properties = node.get("properties")
        if isinstance(properties, dict):
            missing += [f"{path}/properties/{name}" for name, prop in properties.items()
                        if not (isinstance(prop, dict) and str(prop.get("description", "")).strip())]
        for key, value in node.items():
            missing += _undescribed(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            missing += _undescribed(value, f"{path}/{i}")
    return missing


def test_every_property_of_every_committed_schema_has_a_description() -> None:
    missing = [path for file in sorted(DEFAULT_DIR.glob("*.json"))
               for path in _undescribed(json.loads(file.read_text(encoding="utf-8")), file.name)]
    assert not missing, "properties without a description (add a docstring under the field):\n" + "\n".join(missing)


def test_the_description_check_finds_a_missing_description() -> None:
    schema = {"properties": {"a": {"description": "x"}, "b": {"type": "string"}},
              "$defs": {"D": {"properties": {"c": {"description": " "}}}}}
    assert _undescribed(schema, "s.json") == ["s.json/properties/b", "s.json/$defs/D/properties/c"]


# --- the documented fields (product docs, "stream data parts"; spec §11) ----------------------
# type -> (required fields, optional fields), exactly as documented.
DOCUMENTED: dict[str, tuple[str, str]] = {
    "data-om-status": ("windows recordId threadId stepNumber generationCount", ""),
    "data-om-observation-start": (
        "cycleId operationType startedAt tokensToObserve recordId threadId threadIds config", ""),
    "data-om-observation-end": (
        "cycleId operationType completedAt durationMs tokensObserved observationTokens recordId threadId",
        "observations currentTask suggestedResponse extractedValues extractionFailures"),
    "data-om-observation-failed": (
        "cycleId operationType failedAt durationMs tokensAttempted error recordId threadId", "observations"),
    "data-om-buffering-start": (
        "cycleId operationType startedAt tokensToBuffer recordId threadId threadIds config", ""),
    "data-om-buffering-end": (
        "cycleId operationType completedAt durationMs tokensBuffered bufferedTokens recordId threadId",
        "observations extractedValues extractionFailures"),
    "data-om-buffering-failed": (
        "cycleId operationType failedAt durationMs tokensAttempted error recordId threadId", "observations"),
    "data-om-activation": (
        "cycleId operationType activatedAt chunksActivated tokensActivated observationTokens messagesActivated "
        "recordId threadId generationCount config",
        "observations triggeredBy lastActivityAt ttlExpiredMs previousModel currentModel"),
    "data-om-thread-update": ("cycleId threadId newTitle timestamp", "oldTitle"),
}
# omstream's one documented deviation: no step number when the producer reports no steps.
DEVIATIONS = {("data-om-status", "stepNumber")}
FIELD_TYPES: dict[str, str] = {
    **dict.fromkeys("cycleId recordId threadId observations currentTask suggestedResponse error oldTitle newTitle "
                    "previousModel currentModel".split(), "string"),
    **dict.fromkeys("startedAt completedAt failedAt activatedAt timestamp".split(), "date-time"),
    **dict.fromkeys("tokensToObserve tokensObserved observationTokens durationMs tokensAttempted tokensToBuffer "
                    "tokensBuffered bufferedTokens chunksActivated tokensActivated messagesActivated "
                    "generationCount stepNumber lastActivityAt ttlExpiredMs".split(), "integer"),
    "operationType": "enum:observation,reflection",
    "triggeredBy": "enum:threshold,ttl,provider_change",
    "threadIds": "array:string",
    "extractionFailures": "array:ExtractionFailure",
    "extractedValues": "object",
    "config": "MarkerConfig",
    "windows": "Windows",
}


def _resolve(schema: dict, node: dict) -> dict:
    """Follow `$ref`s and look through `X | None`."""
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
    return _resolve(schema, options[0]) if len(options) == 1 and "anyOf" in node else node


def _kind(schema: dict, node: dict) -> str:
    """`string`, `integer`, `date-time`, `enum:a,b`, `array:<kind>` or the name of a model."""
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[1]
    node = _resolve(schema, node)
    if "enum" in node:
        return "enum:" + ",".join(node["enum"])
    if node.get("format") == "date-time":
        return "date-time"
    if node.get("type") == "array":
        return "array:" + _kind(schema, node["items"])
    return node["type"]


@pytest.mark.parametrize("kind", sorted(DOCUMENTED))
def test_every_documented_field_exists_with_its_name_type_and_optionality(kind: str) -> None:
    schema = validator(f"{kind}.json").schema
    data = _resolve(schema, schema["properties"]["data"])
    required, optional = (names.split() for names in DOCUMENTED[kind])
    for name in required + optional:
        assert name in data["properties"], f"{kind}: documented field {name} is missing"
        node = data["properties"][name]
        kind_found = _kind(schema, node)
        assert kind_found == FIELD_TYPES[name], f"{kind}.{name}: {kind_found}"
        is_required = name in data.get("required", [])
        assert is_required == (name in required and (kind, name) not in DEVIATIONS), f"{kind}.{name}"


def test_status_windows_and_marker_config_have_the_documented_shape() -> None:
    defs = validator("data-om-status.json").schema["$defs"]
    assert set(defs["TokenWindow"]["properties"]) == {"tokens", "threshold"}
    assert set(defs["ActiveWindows"]["properties"]) == {"messages", "observations"}
    assert set(defs["BufferedObservationsWindow"]["properties"]) == {
        "chunks", "messageTokens", "projectedMessageRemoval", "observationTokens", "status"}
    assert set(defs["BufferedReflectionWindow"]["properties"]) == {
        "inputObservationTokens", "observationTokens", "status"}
    marker = validator("data-om-activation.json").schema["$defs"]["MarkerConfig"]
    assert set(marker["properties"]) == {"messageTokens", "observationTokens", "scope", "activateAfterIdle"}
    assert marker["required"] == ["messageTokens", "observationTokens", "scope"]


# --- valid samples ----------------------------------------------------------------------------
def event(kind: str, **data: Any) -> dict[str, Any]:
    return {**ENVELOPE, "type": kind, "data": {"recordId": "r1", "threadId": "t1", **data}}


VALID: dict[str, dict[str, Any]] = {
    "message.json": {
        "id": "m1", "threadId": "t1", "resourceId": "u1", "role": "tool", "createdAt": T,
        "content": [
            {"type": "text", "text": "see"},
            {"type": "image", "image": "https://x/cat.png", "width": 1024, "height": 768, "detail": "high"},
            {"type": "file", "url": "https://x/a.pdf", "mimeType": "application/pdf", "filename": "a.pdf"},
            {"type": "file", "data": "aGVsbG8=", "mimeType": "text/plain"},
            {"type": "tool-call", "toolCallId": "c1", "toolName": "search", "args": {"q": "lyon"}},
            {"type": "tool-result", "toolCallId": "c1", "toolName": "search", "result": {"hits": 3}},
            {"type": "tool-result", "toolCallId": "c2", "toolName": "shot", "isError": True, "error": "boom",
             "content": [{"type": "text", "text": "partial"}, {"type": "image", "image": "aGk="}]},
            {"type": "tool-result", "toolCallId": "c3", "toolName": "rm", "denied": True},
            {"type": "reasoning", "text": "hmm"},
            {"type": "data-om-observation-end", "data": {"cycleId": "c"}},
        ],
        "metadata": {"provider": "openai", "model": "gpt-4o", "clientTokenEstimate": 40, "anything": [1]},
        "tokens": {"counter": "tiktoken:o200k_base", "count": 44},
    },
    "step-started.json": {"type": "step-started", "threadId": "t1", "stepNumber": 0, "at": T,
                          "model": "openai/gpt-4o", "afterMessageId": "m1"},
    "turn-ended.json": {"type": "turn-ended", "threadId": "t1", "at": T},
    "observe-requested.json": {"type": "observe-requested", "threadId": "t1", "at": T, "requestId": "r-1"},
    "reflect-requested.json": {"type": "reflect-requested", "threadId": "t1", "at": T, "prompt": "keep dates"},
    "config-overridden.json": {"type": "config-overridden", "threadId": "t1", "at": T,
                               "overrides": {"observation": {"messageTokens": 5000},
                                             "reflection": {"observationTokens": 9000}}},
    "thread-patched.json": {"type": "thread-patched", "threadId": "t1", "at": T, "title": "Trip", "titlePinned": True},
    "thread-deleted.json": {"type": "thread-deleted", "threadId": "t1", "at": T},
    "resource-deleted.json": {"type": "resource-deleted", "resourceId": "u1", "at": T},
    "working-memory-set.json": {"type": "working-memory-set", "threadId": "t1", "at": T,
                                "workingMemory": "# User Information\n- **First Name**: Ada", "requestId": "w1"},
    "model-job.json": {
        "type": "model-job", "kind": "buffer", "cycleId": "c1", "memoryKey": "thread:t1", "threadId": "t1",
        "generation": 0, "cursor": T, "model": "gemini/gemini-2.5-flash",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        "settings": {"temperature": 0.3}, "providerOptions": {"google": {"thinkingConfig": {"thinkingBudget": 215}}},
        "fallbacks": ["openai/gpt-5-mini"], "requestHash": "ab", "createdAt": T, "trigger": "async-buffer",
        "inputTokens": 6000,
    },
    "model-result.json": {
        "type": "model-result", "kind": "observe", "cycleId": "c1", "memoryKey": "thread:t1", "threadId": "t1",
        "requestHash": "ab", "ok": False, "error": "rate limited", "errorCode": "rate-limited", "errorStatus": 429,
        "model": "gemini/gemini-2.5-flash", "attempts": 9, "startedAt": T, "completedAt": T,
        "usage": {"inputTokens": 10}, "providerMetadata": {"google": {}},
    },
    "data-om-status.json": event("data-om-status", generationCount=0, stepNumber=2, windows={
        "active": {"messages": {"tokens": 10, "threshold": 30000}, "observations": {"tokens": 0, "threshold": 40000}},
        "buffered": {"observations": {"chunks": 1, "messageTokens": 6000, "projectedMessageRemoval": 4800,
                                      "observationTokens": 300, "status": "complete"},
                     "reflection": {"inputObservationTokens": 0, "observationTokens": 0, "status": "idle"}}}),
    "data-om-observation-start.json": event(
        "data-om-observation-start", cycleId="c1", operationType="observation", startedAt=T,
        tokensToObserve=31000, threadIds=["t1"], config=CONFIG),
    "data-om-observation-end.json": event(
        "data-om-observation-end", cycleId="c1", operationType="reflection", completedAt=T, durationMs=5,
        tokensObserved=41000, observationTokens=20000, observations="* 🔴 x", currentTask="t",
        extractedValues={"mood": "ok"}, extractionFailures=[{"slug": "title", "error": "timeout"}],
        observedMessageIds=["m1"], cursor=T, generation=1),
    "data-om-observation-failed.json": event(
        "data-om-observation-failed", cycleId="c1", operationType="observation", failedAt=T, durationMs=5,
        tokensAttempted=31000, error="HTTP 500"),
    "data-om-buffering-start.json": event(
        "data-om-buffering-start", cycleId="b1", operationType="observation", startedAt=T, tokensToBuffer=6000,
        threadIds=["t1"], config={**CONFIG, "activateAfterIdle": 300000}),
    "data-om-buffering-end.json": event(
        "data-om-buffering-end", cycleId="b1", operationType="observation", completedAt=T, durationMs=900,
        tokensBuffered=6000, bufferedTokens=400, observations="* x", extractionFailures=[]),
    "data-om-buffering-failed.json": event(
        "data-om-buffering-failed", cycleId="b1", operationType="reflection", failedAt=T, durationMs=900,
        tokensAttempted=20000, error="timeout"),
    "data-om-activation.json": event(
        "data-om-activation", cycleId="b1", operationType="observation", activatedAt=T, chunksActivated=1,
        tokensActivated=6000, observationTokens=400, messagesActivated=7, generationCount=0, config=CONFIG,
        triggeredBy="provider_change", lastActivityAt=1741000000000, ttlExpiredMs=12,
        previousModel="openai/gpt-4o", currentModel="anthropic/claude-sonnet-4", activatedMessageIds=["m1"]),
    "data-om-thread-update.json": {**ENVELOPE, "type": "data-om-thread-update", "data": {
        "cycleId": "c1", "threadId": "t1", "newTitle": "Cycling to Avignon", "timestamp": T}},
    "om-result-ignored.json": {**ENVELOPE, "type": "om-result-ignored",
                               "data": {"cycleId": "c0", "kind": "observe", "reason": "late"}},
    "om-temporal-gap.json": {**ENVELOPE, "type": "om-temporal-gap", "data": {
        "markerId": "__temporal_gap_m9", "precedesMessageId": "m9", "gapText": "3 hours later",
        "gapMs": 10_800_000, "timestamp": "03/03/2025, 12:00 PM UTC", "timestampMs": 1741003200000,
        "contents": "3 hours later — 03/03/2025, 12:00 PM UTC"}},
    "om-memory-deleted.json": {**ENVELOPE, "type": "om-memory-deleted",
                               "data": {"reason": "thread-deleted", "generationCount": 2}},
    "om-input-held.json": {**ENVELOPE, "type": "om-input-held", "inputOffset": 41, "inputLast": True, "data": {
        "cycleId": "b1", "held": 2, "inputType": "message", "messageId": "m9"}},
    "om-input-released.json": {**ENVELOPE, "type": "om-input-released", "data": {"cycleId": "b1", "released": 2}},
    "om-working-memory-updated.json": {**ENVELOPE, "type": "om-working-memory-updated", "data": {
        "workingMemory": {"name": "Ada"}, "requestId": "w1"}},
    "data-part.json": {"type": "data-om-activation", "id": "b1", "data": {"cycleId": "b1"}, "transient": False},
    # As the worker writes it (`omstream.pipeline.folding.refuse`): the record's key, null when it had none.
    "dead-letter.json": {"type": "dead-letter", "code": "wrong-key", "reason": "record key must be the memory key",
                         "source": {"topic": "om.log", "partition": 3, "offset": 41}, "key": None,
                         "value": "eyJ0aHJlYWRJZCI6InQxIn0="},
    "om-message-accepted.json": {**ENVELOPE, "type": "om-message-accepted", "inputOffset": 41, "inputLast": True, "data": {
        "message": {"type": "message", "id": "m1", "threadId": "t1", "role": "user", "content": "hi",
                    "createdAt": T, "tokens": {"counter": "tokenx", "count": 2}}}},
}


def test_there_is_a_valid_sample_for_every_schema_file() -> None:
    assert set(VALID) | {"control.json", "event.json", INDEX} == set(render_schemas())


@pytest.mark.parametrize("file", sorted(VALID))
def test_valid_samples_pass_both_jsonschema_and_pydantic(file: str) -> None:
    sample = VALID[file]
    assert not [e.message for e in validator(file).iter_errors(sample)]
    assert pydantic_accepts(file, sample)
    union = "control.json" if sample.get("type") in INPUT_TYPES - {"message", "model-result"} else (
        "event.json" if "eventId" in sample else None)
    if union:
        assert not [e.message for e in validator(union).iter_errors(sample)]
        assert pydantic_accepts(union, sample)


@pytest.mark.parametrize("cls", [Message, *CONTROL_CLASSES, ModelJob, ModelResult, *EVENT_TYPES.values(), DeadLetter],
                         ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_instances_validate_against_their_schema(cls: type, data: st.DataObject) -> None:
    instance = orjson.loads(orjson.dumps(data.draw(wire_instances(cls)).wire()))
    for file in filter(None, (file_of(cls), union_of(cls))):
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator(file).iter_errors(instance)]
        assert not errors, (file, errors)


# --- invalid samples: refused by both ---------------------------------------------------------
def _without(sample: dict, *path: str) -> dict:
    copy = json.loads(json.dumps(sample))
    node = copy
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return copy


def _with(sample: dict, value: Any, *path: str | int) -> dict:
    copy = json.loads(json.dumps(sample))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


MESSAGE = VALID["message.json"]
INVALID: list[tuple[str, str, dict[str, Any]]] = [
    ("message missing createdAt", "message.json", _without(MESSAGE, "createdAt")),
    ("message with a misspelt field", "message.json", _with(MESSAGE, "t1", "threadID")),
    ("message role outside the enum", "message.json", _with(MESSAGE, "robot", "role")),
    ("message content of the wrong type", "message.json", _with(MESSAGE, 5, "content")),
    ("file part with neither url nor data", "message.json",
     _with(MESSAGE, [{"type": "file", "mimeType": "application/pdf"}], "content")),
    ("file part with both url and data", "message.json",
     _with(MESSAGE, [{"type": "file", "mimeType": "image/png", "url": "u", "data": "aGk="}], "content")),
    ("part type that is not data-*", "message.json", _with(MESSAGE, [{"type": "dat-weather", "data": 1}], "content")),
    ("bare data- part type", "message.json", _with(MESSAGE, [{"type": "data-", "data": 1}], "content")),
    ("unknown part type", "message.json", _with(MESSAGE, [{"type": "source", "url": "u"}], "content")),
    ("image detail outside the enum", "message.json",
     _with(MESSAGE, [{"type": "image", "image": "u", "detail": "ultra"}], "content")),
    ("negative client token estimate", "message.json", _with(MESSAGE, -1, "metadata", "clientTokenEstimate")),
    ("step number of the wrong type", "step-started.json", _with(VALID["step-started.json"], "three", "stepNumber")),
    ("control record without threadId", "control.json", _without(VALID["turn-ended.json"], "threadId")),
    ("resource-deleted without resourceId", "control.json", _without(VALID["resource-deleted.json"], "resourceId")),
    ("override of zero tokens", "config-overridden.json",
     _with(VALID["config-overridden.json"], 0, "overrides", "observation", "messageTokens")),
    ("override of an option that cannot be overridden", "config-overridden.json",
     _with(VALID["config-overridden.json"], 0.5, "overrides", "observation", "bufferActivation")),
    ("job kind outside the enum", "model-job.json", _with(VALID["model-job.json"], "summarise", "kind")),
    ("job trigger outside the enum", "model-job.json", _with(VALID["model-job.json"], "cron", "trigger")),
    ("result without requestHash", "model-result.json", _without(VALID["model-result.json"], "requestHash")),
    ("event without recordId", "event.json", _without(VALID["data-om-observation-end.json"], "data", "recordId")),
    ("activation triggered by an unknown cause", "data-om-activation.json",
     _with(VALID["data-om-activation.json"], "timer", "data", "triggeredBy")),
    ("extraction failure without error", "data-om-buffering-end.json",
     _with(VALID["data-om-buffering-end.json"], [{"slug": "title"}], "data", "extractionFailures")),
    ("status with an unknown buffer status", "data-om-status.json",
     _with(VALID["data-om-status.json"], "paused", "data", "windows", "buffered", "reflection", "status")),
    ("event of an unknown type", "event.json", _with(VALID["data-om-status.json"], "data-om-observed", "type")),
    ("event without its type", "event.json", _without(VALID["om-result-ignored.json"], "type")),
    ("dead letter with a code outside the closed set", "dead-letter.json",
     _with(VALID["dead-letter.json"], "rejected", "code")),
    ("dead letter without its key (null when the record had none)", "dead-letter.json",
     _without(VALID["dead-letter.json"], "key")),
    ("data part with a fifth key", "data-part.json", _with(VALID["data-part.json"], 1, "seq")),
    ("data part without transient", "data-part.json", _without(VALID["data-part.json"], "transient")),
    ("data part whose type is the bare event type", "data-part.json",
     _with(VALID["data-part.json"], "om-message-accepted", "type")),
    ("data part whose data is not an object", "data-part.json", _with(VALID["data-part.json"], "x", "data")),
    ("dead letter of a position before the log", "dead-letter.json",
     _with(VALID["dead-letter.json"], -2, "source", "offset")),
]


@pytest.mark.parametrize(("why", "file", "sample"), INVALID, ids=[case[0] for case in INVALID])
def test_invalid_samples_are_refused_by_both(why: str, file: str, sample: dict[str, Any]) -> None:
    assert list(validator(file).iter_errors(sample)), f"jsonschema accepted: {why}"
    assert not pydantic_accepts(file, sample), f"pydantic accepted: {why}"


# --- decode failures --------------------------------------------------------------------------
def test_decode_input_names_unknown_types_and_newer_versions() -> None:
    unknown = decode_input(orjson.dumps({"type": "data-om-status", "threadId": "t1"}))
    assert isinstance(unknown, DecodeFailure) and unknown.code == "unknown-type"
    assert decode_input(orjson.dumps({"type": 7})).code == "unknown-type"
    for sample in (VALID["reflect-requested.json"], MESSAGE, VALID["model-result.json"]):
        newer = decode_input(orjson.dumps({**sample, "schemaVersion": SCHEMA_VERSION + 1}))
        assert isinstance(newer, DecodeFailure) and newer.code == "newer-schema"
        assert "upgrade omstream" in newer.reason
    assert decode_input(orjson.dumps({**MESSAGE, "schemaVersion": "1"})).code == "newer-schema"
    bad = decode_input(orjson.dumps(_with(MESSAGE, [{"type": "file", "mimeType": "a/b"}], "content")))
    assert bad.code == "invalid" and "exactly one of `data`" in bad.reason
