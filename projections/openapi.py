"""The OpenAPI 3.1 document of `om serve`, generated from the code that serves it.

`build_document()` writes every operation from what decides it: the error codes and their
meanings (`errors.ERROR_CODES`), the recall tool's parameters (`recall.params.RecallParams`), the
event types the feed filters on, the version-name pattern, and the wire records the answers carry
(the JSON Schemas `om schema export` commits to `schemas/json/`, embedded as generated from the
same models: a message in a context window is `message.json`, a frame of the feed
`data-part.json`).  The route table itself is the one thing
written by hand here (`_operations`); tests/unit/projections/test_openapi.py checks it against the
router of `build_web_app` both ways, and that the committed `schemas/openapi.json` is this
module's output byte for byte.  `om serve` answers `GET /openapi.json` with the committed file
(`http/status.py`).

    python -m omstream.projections.openapi           # rewrite schemas/openapi.json
    python -m omstream.projections.openapi --check   # exit 1 when the committed file is stale
"""

from __future__ import annotations

import copy
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from omstream.schemas.base import SCHEMA_VERSION
from omstream.schemas.events import EVENT_TYPES
from omstream.schemas.jsonschema import build_schemas
from omstream.settings import VERSION_NAME

from .http.dashboard import STATIC
from .http.errors import ERROR_CODES, JSON, ErrorCode
from .http.status import OPENAPI_FILE
from .recall.params import RecallParams
from .views.parts import part_type

__all__ = ["build_document", "main", "render_document"]


Schema = dict[str, Any]


# --- the wire records, embedded from schemas/json/ -----------------------------------------------
def _wire_schema(stem: str, name: str) -> Schema:
    """`schemas/json/<stem>.json` as a component: `$id`/`$schema` dropped (a component is no
    schema resource of its own) and its `#/$defs/...` references pointed at where the `$defs`
    now sit, so the file's own text needs no second copy."""
    text = json.dumps(build_schemas()[f"{stem}.json"])  # what `om schema export` commits to schemas/json/
    schema = json.loads(text.replace('"#/$defs/', f'"#/components/schemas/{name}/$defs/'))
    schema.pop("$id", None)
    schema.pop("$schema", None)
    schema["description"] = f"{schema.get('description', '')}\n\n(schemas/json/{stem}.json)".strip()
    return dict(schema)


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties: dict[str, Schema], required: list[str] | None = None, *, closed: bool = True,
            description: str | None = None) -> Schema:
    schema: Schema = {"type": "object", "properties": properties,
                      "required": list(properties) if required is None else required}
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


def _described(schema: Schema, text: str) -> Schema:
    return {**schema, "description": text}


STRING, INTEGER, BOOLEAN = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
COUNT = {"type": "integer", "minimum": 0}


def _recall_params() -> Schema:
    """The recall tool's parameters as pydantic validates them, without per-property titles."""
    schema = RecallParams.model_json_schema(by_alias=True, mode="validation")
    schema.pop("title", None)
    for name, prop in schema.get("properties", {}).items():
        prop.pop("title", None)
        prop["description"] = RECALL_PARAMS[name]
    schema["description"] = ("The recall tool's parameters (spec §12), camelCase; an unknown one is refused. "
                             "`before` and `after` bound mode `threads` by ISO 8601 date or time.")
    return dict(schema)


#: What each recall parameter does (the tool's own description, shortened).
RECALL_PARAMS = {
    "mode": "`messages` (browse the raw messages), `threads` (list the resource's threads) or `search` "
            "(semantic search of the observations, when configured).",
    "query": "What to search for (mode `search`).",
    "cursor": "A message id to page from (mode `messages`).",
    "threadId": "Another thread of the resource to browse (resource scope), or `current`.",
    "anchor": "`start`: page 1 is the oldest messages; `end`: the newest.",
    "page": "The page, from the cursor or the anchor (negative: before the cursor).",
    "limit": "Messages (or threads, or search hits) per page.",
    "detail": "`low`: parts truncated; `high`: whole.",
    "partType": "Only parts of this type.",
    "toolName": "Only tool calls and results of this tool.",
    "partIndex": "Read one part of the cursor's message in full (with `charOffset`).",
    "charOffset": "Where to go on reading a part that was cut.",
    "before": "Mode `threads`: only threads active before this ISO 8601 date or time.",
    "after": "Mode `threads`: only threads active after this ISO 8601 date or time (body only: in the "
             "query `after` is the log position).",
}


def _query_schema(prop: Schema) -> Schema:
    """A body property as a query parameter's schema: a query string has no null."""
    options = [o for o in prop.get("anyOf", []) if o != {"type": "null"}]
    base = options[0] if len(options) == 1 else {k: v for k, v in prop.items() if k != "anyOf"}
    return {k: v for k, v in {**prop, **base}.items() if k not in ("anyOf", "default", "description")
            or (k == "default" and v is not None)}


def _components() -> Schema:
    codes = list(ERROR_CODES)
    meanings = "\n".join(f"- `{code}` ({status}): {text}" for code, (status, text) in ERROR_CODES.items())
    thread_row = _object({
        "threadId": STRING, "messages": _described(COUNT, "Messages the projection holds for the thread."),
        "observed": _described(COUNT, "How many of them are observed (out of the raw window)."),
        "generation": _described(COUNT, "Reflection generation of the memory."),
        "blocked": _described(BOOLEAN, "A blocking cycle is in flight, or the memory holds inputs."),
        "held": _described(COUNT, "Inputs the memory holds until a cycle ends (0 when none)."),
        "title": _nullable(STRING)})
    event_ref = _object({"seq": COUNT, "type": STRING, "id": STRING, "eventTime": _nullable(STRING)},
                        description="The event the answer is as of.")
    context = _object({
        "threadId": STRING,
        "memoryKey": _described(_nullable(STRING), "`thread:<id>` or `resource:<id>`: the memory the thread is in."),
        "otherConversations": _described(_nullable(STRING), "In resource scope, the resource's other threads."),
        "generation": COUNT,
        "cursor": _described(_nullable(STRING), "The last observed message's id."),
        "blocked": _described(BOOLEAN, "A blocking cycle is in flight, or the memory holds inputs behind a "
                                       "cycle (see `held`): the window is about to change."),
        "now": _described(_nullable({"type": "string", "format": "date-time"}),
                          "The newest event time of the thread: the window's relative dates are from it."),
        "observations": _described(STRING, "The observation log, as the Actor reads it."),
        "currentTask": _nullable(STRING), "suggestedResponse": _nullable(STRING),
        "extractedValues": _described({"type": "object"}, "The latest value of each extractor, by slug."),
        "title": _nullable(STRING),
        "workingMemory": _described({}, "The working-memory document (markdown, or a JSON object with "
                                        "`workingMemory.schema`), when there is one."),
        "stateSignals": _described({"type": "array", "items": _object({
            "id": _described(STRING, "`working-memory`."),
            "cacheKey": _described(STRING, "A hash of the document: it changes only when the document does."),
            "content": _described(STRING, "What the agent reads (the chat has it as a user message)."),
        })}, "With `workingMemory.useStateSignals`: the working-memory document, out of the system messages."),
        "cycles": _described(COUNT, "Observation cycles completed."),
        "lastFailure": _described(_nullable({"type": "object"}),
                                  "The last blocking cycle's failure, until a cycle ends well."),
        "held": _described(_nullable(_object({
            "count": _described(COUNT, "Inputs the memory holds (messages, steps, commands)."),
            "cycleId": _described(_nullable(STRING), "The cycle they wait for."),
            "since": _described(STRING, "When the memory began holding them (event time)."),
        }, required=["count", "cycleId", "since"])), "The inputs the memory holds until a cycle ends; a "
            "reader of `?after=` a held input's position gets this (its message is not in the window yet)."),
        "observedMessageIds": {"type": "array", "items": STRING},
        "messages": _described({"type": "array", "items": _ref("Message")},
                               "The unobserved messages, oldest first."),
        "chat": _described({"type": "array", "items": {"type": "object", "required": ["role"],
                                                        "properties": {"role": STRING}}},
                           "The window as ready-to-send chat messages (OpenAI shape): the system "
                           "messages with the observations, then the unobserved messages."),
        "stale": _described(BOOLEAN, "`after` was not reached within `wait`: this is the current view."),
        "asOf": _described(COUNT, "With `?asOf=`: the seq of the last event applied (at most the one asked)."),
        "lastSeq": _described(COUNT, "With `?asOf=`: the memory's newest seq."),
        "event": _nullable(event_ref),
        "windows": _described(_nullable({"type": "object"}), "With `?asOf=`: the token windows as of then."),
    }, required=["threadId", "memoryKey", "generation", "cursor", "blocked", "observations", "messages",
                 "chat", "stale"], description="A thread's context window.")
    recall = _object({
        "messages": _described(STRING, "mode `messages`: the page, rendered for the agent."),
        "threads": _described(STRING, "mode `threads`: the listing, rendered for the agent."),
        "results": _described(STRING, "mode `search`: the matching observation groups, rendered."),
        "text": _described(STRING, "with `partIndex`: the part's text (from `charOffset`)."),
        "count": COUNT, "cursor": _nullable(STRING), "page": INTEGER, "limit": INTEGER,
        "detail": {"enum": ["low", "high"]}, "hasNextPage": BOOLEAN, "hasPrevPage": BOOLEAN, "hasMore": BOOLEAN,
        "truncated": BOOLEAN, "tokenOffset": COUNT, "messageId": STRING, "partIndex": COUNT, "role": STRING,
        "type": STRING, "charOffset": COUNT, "nextCharOffset": COUNT, "note": STRING,
        "error": _described(STRING, "mode `threads`: the current thread could not be resolved."),
    }, required=[], closed=False, description=(
        "The recall tool's answer, as the agent's tool call would get it: mode `messages` pages "
        "(`messages`, `count`, `cursor`, `page`, `limit`, `hasNextPage`, ...), mode `threads` a listing "
        "(`threads`, `count`, `page`, `hasMore`), mode `search` `results` and `count`, and a read of one "
        "part (`partIndex`) `text`, `messageId`, `charOffset`, ..."))
    return {
        "Error": _object({"error": {"type": "string", "enum": codes, "description": meanings},
                          "detail": _described(STRING, "One sentence for a person: what was wrong, "
                                                       "and what is expected.")},
                         description="Every error of every route has this body. `error` is one code of a "
                                     "closed set:\n\n" + meanings),
        "Health": _object({"ok": _described(BOOLEAN, "The projection has read the events that existed "
                                                     "when the server started."),
                           "threads": _described(COUNT, "Threads the projection knows.")}),
        "ThreadList": _object({"threads": {"type": "array", "items": thread_row}}),
        "Context": context,
        "Activity": _object({"threads": {"type": "object", "additionalProperties": _object({
            "seq": _described(COUNT, "The memory's last event these figures include."),
            "labels": _described({"type": "array", "items": STRING},
                                 "What the pages print for each cycle in flight (`observing`, ...)."),
            "running": _described({"type": "array", "items": {"type": "object"}},
                                  "The cycles in flight, oldest first: label, kind, operation, `startedMs`."),
            "buffered": _described({"type": "object"}, "The buffered observation and reflection figures."),
            "statusSeq": _described(_nullable(COUNT), "The status event the buffered figures start from."),
        }, closed=False)}}),
        "RecallParams": _recall_params(),
        "Recall": recall,
        "Message": _wire_schema("message", "Message"),
        "DataPart": _wire_schema("data-part", "DataPart"),
    }


# --- parameters and responses ---------------------------------------------------------------------
def _query(name: str, schema: Schema, text: str) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": text}


THREAD_ID = {"name": "threadId", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1},
             "description": "The thread's id, as its messages name it."}
VERSION = _query("version", {"type": "string", "pattern": f"^{VERSION_NAME.pattern}$"},
                 "Another memory version than the one served: its projection is built on the first request "
                 "and followed from then on (`unknown-version` when the namespace has none of that name).")
WAIT = _query("wait", {"type": "number"},
              "Seconds to wait for `after` (and, on the context, for a blocking observation in flight); "
              "clamped to 0..300, default 10.")
LOG_AFTER = _query("after", {"type": "string", "pattern": r"^[0-9]+:[0-9]+$"},
                   "`PARTITION:OFFSET` of a record of `<ns>.log` (what `OmClient` sends return): first wait, "
                   "up to `wait`, until the projection has applied what that record caused (read your writes).")
TYPES = _query("types", {"type": "string"},
               "Comma-separated event types to keep (the others are skipped, not renumbered): "
               + ", ".join(f"`{part_type(t)}`" for t in EVENT_TYPES) + " (or the record's own type name).")
FOLLOW = _query("follow", {"type": "string", "enum": ["true", "false", "1", "0"]},
                "`false`: replay what is kept, then `data: [DONE]` and the end of the response (default true).")


def _error(codes: list[ErrorCode]) -> Schema:
    return {"description": "Error " + ", ".join(f"`{code}`" for code in codes) + " (components/schemas/Error).",
            "content": {JSON: {"schema": _ref("Error")}}}


def _responses(ok: Schema, *codes: ErrorCode) -> Schema:
    """`ok` as 200, and an `Error` answer for the status of each of `codes` (with `internal`, 500,
    which any route may answer), described by the codes that operation can give."""
    by_status: dict[int, list[ErrorCode]] = {}
    for code in (*codes, "internal"):
        by_status.setdefault(ERROR_CODES[code][0], []).append(code)
    return {"200": ok, **{str(status): _error(listed) for status, listed in sorted(by_status.items())}}


def _json(name: str, text: str) -> Schema:
    return {"description": text, "content": {JSON: {"schema": _ref(name)}}}


SSE = {"description": "Server-Sent Events: one frame per event, `id: <id>` and `data: <DataPart JSON>` "
                      "(components/schemas/DataPart), `: ping` comments every 15 s.",
       "headers": {"x-vercel-ai-ui-message-stream": {"description": "The AI SDK's UI message stream marker.",
                                                     "schema": {"const": "v1"}}},
       "content": {"text/event-stream": {}}}  # a stream, not one document: no schema to hold it to


def _page(text: str) -> Schema:
    return {"description": text, "content": {"text/html": {"schema": {"type": "string"}}}}


#: What a thread route may refuse (the access check's, the version's, the parameters').
READ: tuple[ErrorCode, ...] = ("bad-parameter", "unauthorized", "forbidden", "unknown-thread", "unknown-version")


def _operations() -> dict[str, dict[str, Schema]]:
    public: Schema = {"security": []}
    recall_query = [
        _query(name, _query_schema(prop), RECALL_PARAMS[name])
        for name, prop in _recall_params()["properties"].items() if name != "after"]  # `after` is the route's
    recall_doc = ("The recall tool (spec §12) for the thread in the path (the asking one); parameters "
                  "in the query or, for POST, a JSON object body, which wins over the query. A parameter "
                  "recall cannot accept, or a cursor or thread it cannot see, is `bad-parameter` whose "
                  "detail is the sentence the tool would give the agent.")
    return {
        "/healthz": {"get": {
            "operationId": "health", "summary": "Readiness", **public,
            "description": "200 once the projection has read `<ns>.events` up to its end offsets at start; "
                           "503 before (a window served then could miss what the log already has).",
            "responses": {"200": _json("Health", "Ready."), "503": _json("Health", "Still catching up.")}}},
        "/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This document", **public,
            "responses": {"200": {"description": "The OpenAPI document (schemas/openapi.json).",
                                  "content": {JSON: {"schema": {"type": "object"}}}}}}},
        "/threads": {"get": {
            "operationId": "listThreads", "summary": "Threads known to the projection",
            "description": "With tokens, only the threads whose resource the token may read.",
            "parameters": [VERSION],
            "responses": _responses(_json("ThreadList", "The threads."), "bad-parameter", "unauthorized",
                                    "unknown-version")}},
        "/threads/{threadId}/context": {"get": {
            "operationId": "getContext", "summary": "A thread's context window",
            "description": "The observations and the unobserved messages. A blocked memory (a blocking "
                           "observation in flight) is waited for, up to `wait`, before answering.",
            "parameters": [THREAD_ID, LOG_AFTER, WAIT, VERSION, _query(
                "asOf", {"type": "integer", "minimum": 0},
                "The window as it was right after the memory's event of that seq, folded from the kept "
                "events; adds `asOf`, `lastSeq`, `event` and `windows`.")],
            "responses": _responses(_json("Context", "The window."), *READ)}},
        "/threads/{threadId}/events": {"get": {
            "operationId": "threadEvents", "summary": "A thread's memory events, live (SSE)",
            "description": "Replay after `after`, then live; in resource scope the events of the resource "
                           "memory that concern the thread. The SSE id is the memory's `seq`.",
            "parameters": [THREAD_ID, _query("after", {"type": "integer", "minimum": 0},
                                             "Resume after this `seq` (`Last-Event-ID` wins)."),
                           TYPES, FOLLOW, VERSION,
                           {"name": "Last-Event-ID", "in": "header", "required": False,
                            "schema": {"type": "integer", "minimum": 0},
                            "description": "What a browser's `EventSource` resends on reconnecting: "
                                           "resume after this `seq`."}],
            "responses": _responses(SSE, *READ)}},
        "/events": {"get": {
            "operationId": "allEvents", "summary": "Every memory's events, live (SSE, operators)",
            "description": "Live from the request on (no replay; with `follow=false` every kept event, memory "
                           "after memory, then `[DONE]`). The SSE id is `<memoryKey>:<seq>`. Needs a token "
                           "granted `*`.",
            "parameters": [TYPES, FOLLOW, VERSION],
            "responses": _responses(SSE, "bad-parameter", "unauthorized", "forbidden", "unknown-version")}},
        "/threads/{threadId}/recall": {
            "get": {"operationId": "recall", "summary": "Recall (query parameters)", "description": recall_doc,
                    "parameters": [THREAD_ID, *recall_query, LOG_AFTER, WAIT, VERSION],
                    "responses": _responses(_json("Recall", "The tool's answer."), *READ)},
            "post": {"operationId": "recallPost", "summary": "Recall (JSON body)", "description": recall_doc,
                     "parameters": [THREAD_ID, LOG_AFTER, WAIT, VERSION],
                     "requestBody": {"required": False, "content": {JSON: {"schema": _ref("RecallParams")}}},
                     "responses": _responses(_json("Recall", "The tool's answer."), *READ, "too-large")}},
        "/dashboard/activity": {"get": {
            "operationId": "dashboardActivity", "summary": "Dashboard: what each memory is doing now",
            "description": "The live figures both dashboard pages show (`projections/activity.py`), for every "
                           "thread the token may read (or `threadId` alone): the cycles in flight and the "
                           "buffered figures.",
            "parameters": [_query("threadId", STRING, "Only this thread."), VERSION],
            "responses": _responses(_json("Activity", "The figures, by thread id."), "bad-parameter",
                                    "unauthorized", "unknown-version")}},
        "/": {"get": {"operationId": "dashboard", "summary": "Dashboard: the thread list", **public,
                      "description": "The page holds no data: it reads the data routes with the token it "
                                     "was opened with (`?access_token=`).",
                      "responses": {"200": _page("The page.")}}},
        "/threads/{threadId}": {"get": {"operationId": "dashboardThread", "summary": "Dashboard: one memory",
                                        **public, "parameters": [THREAD_ID],
                                        "responses": {"200": _page("The page.")}}},
        "/static/{name}": {"get": {
            "operationId": "dashboardFile", "summary": "Dashboard: scripts and style sheet", **public,
            "parameters": [{"name": "name", "in": "path", "required": True,
                            "schema": {"type": "string", "enum": sorted(STATIC)},
                            "description": "The file's name (any other is `not-found`)."}],
            "responses": {"200": {"description": "The file.",
                                  "content": {kind: {} for kind in sorted(set(STATIC.values()))}},
                          "404": _error(["not-found"])}}},
    }


def build_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of `om serve`'s routes."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "omstream read side (om serve)",
            "version": f"{SCHEMA_VERSION}",
            "description": (
                "Context windows, the live event feed and recall over a namespace's memories. Every error "
                "is JSON, `{\"error\": code, \"detail\": text}` (components/schemas/Error). With tokens "
                "configured (required off loopback), every route but the public ones (`/healthz`, this "
                "document, the dashboard's pages) needs one: 401 without a known token, 403 for another "
                "resource's thread; `/threads` lists only what the token may read. Without tokens "
                "(loopback) nothing is checked. A request the HTTP parser cannot read at all (a control "
                "character in a header, a malformed request line) is refused before any route, with "
                "aiohttp's plain-text 400."),
        },
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "security": [{"bearerToken": []}, {"accessToken": []}, {}],
        "paths": copy.deepcopy(_operations()),
        "components": {
            "securitySchemes": {
                "bearerToken": {"type": "http", "scheme": "bearer",
                                "description": "`Authorization: Bearer <token>`, a token of "
                                               "`omstream.api_tokens` / `OM_API_TOKENS` or the tokens file."},
                "accessToken": {"type": "apiKey", "in": "query", "name": "access_token",
                                "description": "The same token in the query, for clients that cannot set a "
                                               "header (a browser's `EventSource`)."},
            },
            "schemas": _components(),
        },
    }


def render_document() -> str:
    """The exact text of the committed file: sorted keys, two-space indent, trailing newline."""
    return json.dumps(build_document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _committed_path() -> Path:
    return Path(str(resources.files("omstream.schemas") / OPENAPI_FILE))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path, text = _committed_path(), render_document()
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if "--check" in args:
        if current != text:
            print(f"{path} is stale: run python -m omstream.projections.openapi", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    if current != text:
        path.write_text(text, encoding="utf-8", newline="\n")
    print(f"{path} {'written' if current != text else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
