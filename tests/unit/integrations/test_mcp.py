"""`om mcp`'s pure parts: the tools' input schemas (valid JSON Schemas, recall's the agent's own),
the check of a call's arguments, the bearer token at the HTTP door, and a malformed call
answered as an MCP error by the server (the SDK's in-process client; no broker, no `om serve`)."""

from __future__ import annotations

import asyncio
import importlib
import sys

import jsonschema
import pytest

from omstream.api_tokens import TokenTable
from omstream.client.tools import recall_tool_definition
from omstream.integrations.mcp_tools import BadCall, MemoryTools, checked, tool_specs
from omstream.schemas.config import OmConfig
from omstream.settings import Settings

pytest.importorskip("mcp")

from omstream.integrations.mcp import CONTEXT_URI, OBSERVATIONS_URI, TokenCheck, bearer, build_server  # noqa: E402

ADMIN, USER = "admin-token-0123456789", "user-token-0123456789"


def _om(**options) -> OmConfig:
    return OmConfig.model_validate(options)


def test_the_four_tools_have_json_schema_objects():
    specs = tool_specs(_om())
    assert list(specs) == ["context", "recall", "search", "add_messages"]
    for spec in specs.values():
        jsonschema.Draft202012Validator.check_schema(spec.input_schema)
        assert spec.input_schema["type"] == "object" and "threadId" in spec.input_schema["required"]
        assert spec.description


@pytest.mark.parametrize("retrieval, scope, search", [
    (False, "thread", False), (True, "resource", False),
    ({"scope": "thread", "vector": True}, "thread", True), ({"scope": "resource", "vector": True}, "resource", True)])
def test_recall_takes_the_agent_tool_s_parameters_for_the_configuration(retrieval, scope, search):
    schema = tool_specs(_om(retrieval=retrieval))["recall"].input_schema
    agent = recall_tool_definition(scope, search=search)["function"]["parameters"]
    # The same parameters, but the asking thread, which an MCP caller names (recall's own
    # threadId, another thread of the user, is that same argument).
    assert {k: v for k, v in schema["properties"].items() if k != "threadId"} == \
        {k: v for k, v in agent["properties"].items() if k != "threadId"}
    assert schema["required"] == ["threadId"] and schema["additionalProperties"] is False
    assert ("search" in schema["properties"]["mode"]["enum"]) is search


@pytest.mark.parametrize("tool, arguments, says", [
    ("context", {}, "'threadId' is a required property"),
    ("context", {"threadId": ""}, "threadId"),
    ("context", {"threadId": "t", "extra": 1}, "'extra' was unexpected"),
    ("recall", {"threadId": "t", "page": "two"}, "page: 'two' is not of type 'integer'"),
    ("recall", {"threadId": "t", "limit": 500}, "limit: 500 is greater than the maximum of 20"),
    ("search", {"threadId": "t"}, "'query' is a required property"),
    ("add_messages", {"threadId": "t", "messages": []}, "messages: [] should be non-empty"),
    ("add_messages", {"threadId": "t", "messages": [{"role": "robot", "content": "x"}]}, "messages/0/role"),
])
def test_arguments_that_do_not_fit_are_refused_naming_the_argument(tool, arguments, says):
    with pytest.raises(BadCall) as refused:
        checked(tool_specs(_om())[tool], arguments)
    assert str(refused.value).startswith(f"{tool}: ") and says in str(refused.value), str(refused.value)


def test_arguments_that_fit_pass_as_given():
    args = {"threadId": "t", "messages": [{"role": "user", "content": "hi", "id": "m1"}], "resourceId": "u1"}
    assert checked(tool_specs(_om())["add_messages"], args) == args


def test_the_bearer_token_is_read_as_om_serve_reads_it():
    assert bearer({"authorization": f"Bearer {USER}"}) == USER
    assert bearer({"authorization": f"bearer  {USER} "}) == USER
    assert bearer({"authorization": f"Basic {USER}"}) is None
    assert bearer({}) is None and bearer({"authorization": "Bearer "}) is None


def test_an_http_request_without_a_known_token_gets_401():
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    inner = Starlette(routes=[Route("/mcp", lambda request: PlainTextResponse("in"), methods=["POST"])])
    app = TokenCheck(inner, TokenTable(((USER, frozenset({"u1"})),)))
    with TestClient(app) as http:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}):
            answer = http.post("/mcp", headers=headers)
            assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        assert http.post("/mcp", headers={"Authorization": f"Bearer {USER}"}).text == "in"


class _NoClient:
    """Stands for the OmClient: the calls here are refused before anything is read."""

    settings = Settings()

    def with_token(self, token):
        raise AssertionError("a refused call must not reach om serve")


def test_a_malformed_call_is_an_mcp_error_and_the_server_answers_the_next():
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    server = build_server(MemoryTools(_NoClient(), tokens=None), lambda ctx: None)

    async def session():
        async with Client(server) as client:
            listed = await client.list_tools()
            bad = await client.call_tool("context", {"threadId": 7})
            unknown = await client.call_tool("forget_everything", {})
            templates = await client.list_resource_templates()
            with pytest.raises(MCPError) as no_such:
                await client.read_resource("omstream://nothing/here")
            again = await client.list_tools()
        return listed, bad, unknown, templates, no_such.value, again

    listed, bad, unknown, templates, no_such, again = asyncio.run(session())
    assert [t.name for t in listed.tools] == [t.name for t in again.tools] == ["context", "recall", "search",
                                                                                 "add_messages"]
    assert bad.is_error and "threadId: 7 is not of type 'string'" in bad.content[0].text
    assert unknown.is_error and "no tool 'forget_everything'" in unknown.content[0].text
    assert [t.uri_template for t in templates.resource_templates] == [CONTEXT_URI, OBSERVATIONS_URI]
    assert "no such resource" in str(no_such)


def test_importing_it_without_the_sdk_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp_types", None)
    monkeypatch.delitem(sys.modules, "omstream.integrations.mcp")
    with pytest.raises(ImportError, match=r"pip install 'omstream\[mcp\]'"):
        importlib.import_module("omstream.integrations.mcp")


def test_om_mcp_over_http_off_loopback_without_tokens_is_refused_before_anything(monkeypatch, capsys):
    import omstream.logs
    from omstream.cli import main

    monkeypatch.setattr(omstream.logs, "setup_logging", lambda level: None)  # the tests' own logging stays
    monkeypatch.delenv("OM_API_TOKENS", raising=False)
    monkeypatch.delenv("OM_API_TOKENS_FILE", raising=False)
    monkeypatch.setenv("OM_BOOTSTRAP", "127.0.0.1:1")  # nothing listens: the check comes first
    assert main(["mcp", "--transport", "http", "--host", "0.0.0.0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("om mcp: --host '0.0.0.0' is not a loopback address"), err


def test_the_client_reads_om_serve_with_the_token_it_is_given():
    from omstream.client.om_client import OmClient

    client = OmClient(Settings())
    reader = client.with_token(USER)
    assert client._headers() == {} and reader._headers() == {"Authorization": f"Bearer {USER}"}
    # The same producer and sealer: one Kafka client for every caller of om mcp.
    assert reader._producer is client._producer and reader.sealer is client.sealer and client.token is None
    assert OmClient(Settings(), token=ADMIN)._headers() == {"Authorization": f"Bearer {ADMIN}"}
