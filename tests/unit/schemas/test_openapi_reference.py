"""The generated HTTP reference: every operation of an OpenAPI document, with its parameters,
body, answers and the error codes, on the page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from omstream.schemas.openapi_reference import (
    error_codes,
    missing_document_page,
    operation_anchor,
    operations,
    render_http_reference,
    schema_label,
)

COMMITTED = Path(__file__).resolve().parents[3] / "schemas" / "openapi.json"
_ERROR = {"$ref": "#/components/schemas/Error"}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Sample server", "version": "7", "description": "What it serves."},
    "security": [{"bearer": []}, {}],
    "paths": {
        "/healthz": {"get": {"summary": "Readiness", "security": [],
                             "responses": {"200": {"description": "Ready."}}}},
        "/things/{thingId}": {
            "get": {
                "summary": "One thing", "description": "Reads the thing.", "operationId": "getThing",
                "parameters": [
                    {"name": "thingId", "in": "path", "required": True, "description": "The thing's id.",
                     "schema": {"type": "string", "minLength": 1}},
                    {"name": "detail", "in": "query", "description": "How much.",
                     "schema": {"enum": ["low", "high"], "default": "low"}},
                    {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer", "minimum": 0}},
                ],
                "responses": {
                    "200": {"description": "The thing.",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}},
                            "headers": {"x-marker": {"description": "A marker."}}},
                    "404": {"description": "`unknown-thing`", "content": {"application/json": {"schema": _ERROR}}},
                },
            },
            "delete": {"summary": "Forget it",
                       "responses": {"204": {"description": "Gone."},
                                     "401": {"description": "`unauthorized`",
                                             "content": {"application/json": {"schema": _ERROR}}}}},
        },
        "/things": {"post": {
            "summary": "Make a thing",
            "requestBody": {"required": True, "description": "The new thing.",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
            "responses": {"201": {"description": "Made."},
                          "413": {"description": "`too-large`", "content": {"application/json": {"schema": _ERROR}}}},
        }},
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "A bearer token."}},
        "schemas": {
            "Thing": {"type": "object", "description": "A thing.", "required": ["id"], "properties": {
                "id": {"type": "string", "description": "Its id."},
                "tags": {"type": "array", "items": {"type": "string"}},
                "size": {"anyOf": [{"type": "integer", "maximum": 9}, {"type": "null"}], "default": None}}},
            "Error": {"type": "object", "description": "Every error.", "required": ["error", "detail"], "properties": {
                "error": {"enum": ["unknown-thing", "unauthorized", "too-large"], "description": (
                    "- `unknown-thing` (404): No such thing.\n- `unauthorized` (401): No token.\n"
                    "- `too-large` (413): The body is too big.")},
                "detail": {"type": "string", "description": "For a person."}}},
        },
    },
}


def test_every_path_and_method_is_on_the_page() -> None:
    page = render_http_reference(DOCUMENT)
    found = [(method, path) for method, path, _ in operations(DOCUMENT)]
    assert found == [("get", "/healthz"), ("get", "/things/{thingId}"), ("delete", "/things/{thingId}"),
                     ("post", "/things")]
    for method, path in found:
        assert f"### `{method.upper()} {path}` {{ #{operation_anchor(method, path)} }}" in page
        assert f"[`{path}`](#{operation_anchor(method, path)})" in page


def test_parameters_bodies_and_answers_are_on_the_page() -> None:
    page = render_http_reference(DOCUMENT)
    assert "| `thingId` | path | string, not empty | yes | The thing's id. |" in page
    assert '| `detail` | query | `"low"` or `"high"` | no | How much. Default `"low"`. |' in page
    assert "| `Last-Event-ID` | header | integer, ≥ 0 | no |  |" in page
    assert "**Request body** (required): `application/json`: [Thing](#schema-thing)" in page
    assert "The new thing." in page
    assert "| 200 | The thing. | `application/json`: [Thing](#schema-thing) | `x-marker`: A marker. |" in page
    assert "| 204 | Gone. |  |  |" in page
    assert "| 413 | `too-large` | `application/json`: [Error](#schema-error) |  |" in page
    assert "Public: no token is needed." in page
    assert "| `bearer` | bearer | A bearer token. |" in page
    assert "| `size` | integer, ≤ 9 or null | no | Default `null`. |" in page
    assert "| `tags` | list of string | no |  |" in page


def test_the_error_codes_are_listed_with_status_and_meaning() -> None:
    assert error_codes(DOCUMENT) == [("unknown-thing", "404", "No such thing."), ("unauthorized", "401", "No token."),
                                     ("too-large", "413", "The body is too big.")]
    page = render_http_reference(DOCUMENT)
    assert "| `unknown-thing` | 404 | No such thing. |" in page
    assert "### `Error` { #schema-error }" in page


def test_schema_labels() -> None:
    assert schema_label({"$ref": "#/components/schemas/Thing/$defs/Part"}) == "`Part`"
    assert schema_label({"const": "v1"}) == '`"v1"`'
    assert schema_label({"type": ["string", "null"], "pattern": "^a$"}) == "string or null, matching `^a$`"
    assert schema_label(None) == "any value"


def test_a_cell_never_breaks_its_table() -> None:
    document = json.loads(json.dumps(DOCUMENT))
    document["paths"]["/healthz"]["get"]["responses"]["200"]["description"] = "a | b\n\nc"
    assert "| 200 | a \\| b<br><br>c |" in render_http_reference(document)


def test_a_missing_document_is_said() -> None:
    assert "`schemas/openapi.json` is missing" in missing_document_page("schemas/openapi.json")


@pytest.mark.skipif(not COMMITTED.is_file(), reason="no committed OpenAPI document yet")
def test_every_operation_of_the_committed_document_is_on_the_page() -> None:
    document = json.loads(COMMITTED.read_text(encoding="utf-8"))
    page = render_http_reference(document)
    assert operations(document)
    for method, path, operation in operations(document):
        assert f"### `{method.upper()} {path}`" in page
        for status in operation.get("responses", {}):
            assert f"| {status} |" in page
    for code, _, _ in error_codes(document):
        assert f"| `{code}` |" in page
