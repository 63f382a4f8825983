"""The OpenAPI document of `om serve` (schemas/openapi.json): generated, committed, served, and
describing exactly the routes the server has, with the one closed set of error codes."""

import ast
import asyncio
import json
import re
from pathlib import Path
from typing import get_args

import pytest
from aiohttp.test_utils import TestClient, TestServer
from openapi_spec_validator import validate

from omstream.api_tokens import TokenTable, grants_from_text
from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.errors import ERROR_CODES, ErrorCode
from omstream.projections.http.status import committed_text
from omstream.projections.http.web import build_web_app
from omstream.projections.openapi import build_document, render_document
from omstream.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}


def _shape(path: str) -> str:
    """A path template with its variables unnamed: the router says `{thread_id}`, the document
    (the wire's spelling) `{threadId}`; the routes are the same."""
    return re.sub(r"\{[^}]+\}", "{}", path)


def routes_of_the_server() -> set[tuple[str, str]]:
    app = build_web_app(ProjectionFeed(Settings()))
    return {(route.method.lower(), _shape(route.resource.canonical))
            for route in app.router.routes() if route.method != "HEAD"}  # HEAD: aiohttp's twin of each GET


def test_the_committed_document_is_the_generated_one():
    # Regenerate with: python -m omstream.projections.openapi
    assert (ROOT / "schemas" / "openapi.json").read_text(encoding="utf-8") == render_document()
    assert committed_text() == render_document()  # and the packaged copy the server reads is that file


def test_the_document_is_valid_openapi_3_1():
    document = build_document()
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_every_route_is_documented_and_every_documented_path_is_a_route():
    documented = {(method, _shape(path)) for path, item in build_document()["paths"].items()
                  for method in item if method in METHODS}
    served = routes_of_the_server()
    assert ("get", "/openapi.json") in served
    assert served - documented == set(), "routes missing from the document"
    assert documented - served == set(), "documented paths the server does not have"


def test_the_error_codes_are_one_closed_set_and_the_document_lists_them_all():
    assert list(ERROR_CODES) == list(get_args(ErrorCode))
    error = build_document()["components"]["schemas"]["Error"]
    assert error["properties"]["error"]["enum"] == list(ERROR_CODES)
    for code, (status, meaning) in ERROR_CODES.items():
        assert f"`{code}` ({status}): {meaning}" in error["description"]
    assert "bad-request" not in ERROR_CODES  # the feed's 400s are `bad-parameter` like every route's


def _api_errors() -> list[tuple[str, int, str]]:
    """Every `api_error(status, "code", ...)` written in the read side's source."""
    found = []
    for path in sorted((ROOT / "projections").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "api_error":
                status, code = node.args[0], node.args[1]
                assert isinstance(status, ast.Constant) and isinstance(code, ast.Constant), ast.unparse(node)
                found.append((path.name, status.value, code.value))
    return found


def test_every_error_raised_uses_a_code_of_the_set_with_its_status():
    raised = _api_errors()
    assert len({code for _, _, code in raised}) >= 5, raised  # the scan sees the handlers' errors
    wrong = [(where, status, code) for where, status, code in raised
             if code not in ERROR_CODES or ERROR_CODES[code][0] != status]
    assert wrong == []


def test_the_statuses_each_operation_documents_carry_the_error_body():
    for path, item in build_document()["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400 and path != "/healthz":
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/Error"}, (method, path, status)


@pytest.mark.parametrize("tokens", [None, TokenTable(grants_from_text("admin-token-0123456789 = *"))],
                         ids=["open", "tokens"])
def test_the_server_serves_the_committed_document_without_a_token(tokens):
    async def main():
        client = TestClient(TestServer(build_web_app(ProjectionFeed(Settings()), tokens=tokens)))
        await client.start_server()
        try:
            response = await client.get("/openapi.json")
            return response.status, response.content_type, await response.text()
        finally:
            await client.close()

    status, kind, text = asyncio.run(main())
    assert (status, kind) == (200, "application/json")
    assert text == committed_text() and json.loads(text)["paths"]
