"""`om mcp`: a namespace's memories as an MCP server, on the official `mcp` SDK (its low-level
`Server`, over stdio or streamable HTTP).

    om mcp --config om.toml                         # stdio: what a desktop client spawns
    om mcp --config om.toml --transport http        # streamable HTTP on 127.0.0.1:8767/mcp

Tools `context`, `recall`, `search` and `add_messages` (and `update_working_memory` when the
memory keeps a working memory for the agent), and two resource templates,
`omstream://threads/{threadId}/context` (the window, JSON) and
`omstream://threads/{threadId}/observations` (the observations, text); what they do is
`omstream.integrations.mcp_tools`'s.  The server is a client like any agent: it reads from a
running `om serve` and writes to Kafka through one `OmClient`.

Who may read and write what is `om serve`'s token table: over HTTP each request shows a bearer
token (401 at the door for none or an unknown one, when the configuration has tokens), and
`om serve` answers every read made for it by that token's grants; over stdio the caller is the
local user who spawned the process, and the token is `OMSTREAM_TOKEN`'s (see `mcp_tools`).

A refused call (arguments that do not fit the tool's schema, an unknown thread, `om serve`'s
refusal) is a tool result with `isError`, and a refused resource read an MCP error: the server
answers the next call.
"""

from __future__ import annotations

import json
import logging
import re
import socket
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import quote, unquote

try:
    import mcp_types as types
    from mcp.server import Server, ServerRequestContext
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise ImportError("omstream.integrations.mcp needs the MCP SDK: pip install 'omstream[mcp]'") from exc

from omstream.api_tokens import TokenTable
from omstream.projections.http.access import AccessRefused, is_loopback, token_table
from omstream.schemas.errors import OmError
from omstream.settings import Settings

from .mcp_tools import BadCall, MemoryTools

__all__ = ["CONTEXT_URI", "CannotListen", "OBSERVATIONS_URI", "build_server", "run_http", "run_stdio", "serve_tokens"]

log = logging.getLogger("omstream.mcp")

CONTEXT_URI = "omstream://threads/{threadId}/context"
OBSERVATIONS_URI = "omstream://threads/{threadId}/observations"
_URI = re.compile(r"^omstream://threads/(?P<thread>[^/]+)/(?P<what>context|observations)$")
TokenOf = Callable[[ServerRequestContext[Any, Any]], str | None]


def serve_tokens(settings: Settings) -> TokenTable | None:
    """`om serve`'s tokens, as its configuration gives them (the address check is the caller's:
    `om mcp`'s own host, not `om serve`'s)."""
    return token_table(replace(settings, web_host="127.0.0.1"))


def bearer(headers: Any) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, as `om serve` reads it."""
    scheme, _, value = (headers.get("authorization") or "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def _text(answer: Any) -> str:
    return json.dumps(answer, ensure_ascii=False)


def build_server(tools: MemoryTools, token_of: TokenOf) -> Server[Any]:
    """The MCP server of `tools`; `token_of(ctx)` is the token a request's reads show `om serve`."""

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=spec.name, description=spec.description, input_schema=spec.input_schema)
            for spec in tools.specs.values()])

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            answer = await tools.call(params.name, params.arguments, token_of(ctx))
        except BadCall as exc:
            log.info("tool call refused", extra={"tool": params.name, "reason": str(exc)[:300]})
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))], is_error=True)
        except Exception as exc:  # noqa: BLE001 - a bug answers this call, never the server's life
            log.exception("tool call failed", extra={"tool": params.name})
            return types.CallToolResult(content=[types.TextContent(
                type="text", text=f"internal error ({type(exc).__name__}); the server's log has the details")],
                is_error=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=_text(answer))],
                                    structured_content=answer)

    async def list_templates(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(name="context", uri_template=CONTEXT_URI, mime_type="application/json",
                                   description="The thread's context window, as the context tool gives it."),
            types.ResourceTemplate(name="observations", uri_template=OBSERVATIONS_URI, mime_type="text/plain",
                                   description="The thread's observations, as its window holds them."),
        ])

    async def list_resources(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListResourcesResult:
        try:  # the threads om serve shows this token
            threads = await tools.client.with_token(token_of(ctx)).threads(base_url=tools.base_url)
        except Exception as exc:  # noqa: BLE001 - om serve away or refusing: the error says which
            raise MCPError(code=types.INTERNAL_ERROR, message=f"the thread list: {exc}") from None
        resources = []
        for thread in threads:
            quoted = quote(thread["threadId"], safe="")
            name = thread.get("title") or thread["threadId"]
            resources += [
                types.Resource(name=f"{name}: context", uri=CONTEXT_URI.replace("{threadId}", quoted),
                               mime_type="application/json"),
                types.Resource(name=f"{name}: observations", uri=OBSERVATIONS_URI.replace("{threadId}", quoted),
                               mime_type="text/plain")]
        return types.ListResourcesResult(resources=resources)

    async def read_resource(ctx: ServerRequestContext[Any, Any],
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        found = _URI.match(uri)
        if found is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no such resource: {uri} "
                           f"(templates {CONTEXT_URI}, {OBSERVATIONS_URI})", data={"uri": uri})
        try:
            window = await tools.window(unquote(found["thread"]), token_of(ctx))
        except Exception as exc:  # noqa: BLE001 - refused or failed: an MCP error, the server goes on
            raise MCPError(code=types.INVALID_PARAMS if isinstance(exc, BadCall) else types.INTERNAL_ERROR,
                           message=str(exc), data={"uri": uri}) from None
        if found["what"] == "context":
            contents = types.TextResourceContents(uri=uri, text=_text(window), mime_type="application/json")
        else:
            contents = types.TextResourceContents(uri=uri, text=window.get("observations") or "",
                                                  mime_type="text/plain")
        return types.ReadResourceResult(contents=[contents])

    return Server("omstream", instructions="Observational memory of agent threads: read a thread's context "
                  "window, recall its original messages, search its observations, add messages.",
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                  on_list_resource_templates=list_templates, on_read_resource=read_resource,
                  get_tool_input_schema=lambda name: spec.input_schema if (spec := tools.specs.get(name)) else None)


async def run_stdio(settings: Settings, *, url: str, token: str | None, wait: float = 30.0) -> None:
    """Serve over stdin/stdout until the client closes them; every read shows `token`."""
    from omstream.client.om_client import OmClient

    async with OmClient(settings) as client:
        tools = MemoryTools(client, tokens=serve_tokens(settings), base_url=url, wait=wait)
        server = build_server(tools, lambda ctx: token)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


class TokenCheck:
    """ASGI middleware: an HTTP request without a token of the table gets 401, as from `om serve`."""

    def __init__(self, app: Any, tokens: TokenTable) -> None:
        self.app, self.tokens = app, tokens

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            from starlette.datastructures import Headers
            from starlette.responses import JSONResponse

            token = bearer(Headers(scope=scope))
            if token is None or self.tokens.grant(token) is None:
                detail = "unknown token" if token else "send a token: 'Authorization: Bearer <token>'"
                response = JSONResponse({"error": "unauthorized", "detail": detail}, status_code=401,
                                        headers={"WWW-Authenticate": 'Bearer realm="omstream"'})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class CannotListen(OmError, OSError):
    """`om mcp` could not bind its HTTP address (the port taken, or no such interface)."""


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise CannotListen(f"cannot listen on {host}:{port} ({exc.strerror or exc}): choose another --port "
                           "or --host") from None
    return sock


async def run_http(settings: Settings, *, url: str, host: str, port: int, wait: float = 30.0,
                   on_ready: Callable[[str], None] | None = None) -> None:
    """Serve streamable HTTP at `http://host:port/mcp` until cancelled.  A host that is not
    loopback needs tokens (`AccessRefused` otherwise, before anything is bound)."""
    import asyncio

    import uvicorn

    from omstream.client.om_client import OmClient

    tokens = serve_tokens(settings)
    if tokens is None and not is_loopback(host):
        raise AccessRefused(f"--host {host!r} is not a loopback address and no token is set: set omstream.api_tokens "
                            "/ OM_API_TOKENS or omstream.api_tokens_file / OM_API_TOKENS_FILE (or serve on 127.0.0.1)")
    sock = _listen(host, port)
    async with OmClient(settings) as client:
        tools = MemoryTools(client, tokens=tokens, base_url=url, wait=wait)
        server = build_server(tools, lambda ctx: bearer(ctx.request.headers) if ctx.request is not None else None)
        app: Any = server.streamable_http_app(host=host)
        if tokens is not None:
            app = TokenCheck(app, tokens)
        web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        serving = asyncio.create_task(web.serve(sockets=[sock]))
        while not web.started and not serving.done():
            await asyncio.sleep(0.05)
        if web.started and on_ready is not None:
            on_ready(f"http://{host}:{port}/mcp")
        await serving
