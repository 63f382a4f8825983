"""`om mcp` end to end, as an MCP client uses it (issue 42, acceptance 3): the broker, a worker and
`om serve` with tokens, then `om mcp` spawned over stdio by the SDK's stdio client and served
over streamable HTTP to the SDK's HTTP client.

Over each transport: the tools list (each input schema a JSON Schema object the client took);
`add_messages` turn after turn until the scripted Observer observes (a small `messageTokens`);
then `context` holds the observations and none of the observed messages, `recall` reads the
thread's start, `search` finds the observation, the resources give the window and the
observations; a malformed call and an unknown thread are MCP errors and the server answers the
next call.  Over HTTP, a request without a token or with a wrong one is refused (401), and a
token of another resource can neither read the thread (om serve's 403) nor write to it.  The
namespace's events show every message the tools were given exactly once, a message sent twice
(by id) included.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import jsonschema
import pytest

from omstream.infra.broker import free_port
from tests.integration.options import om_options
from tests.integration.support import Server, events

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_client.py"

ALICE, BOB, WRONG = "alice-token-0123456789", "bob-token-0123456789ab", "wrong-token-0123456789"
TOKENS = f"{ALICE} = alice; {BOB} = bob"
TURNS = [
    ("I am planning a cycling trip from Lyon to Avignon in May, four days along the Rhone.",
     "A fine route: the ViaRhona follows the river most of the way."),
    ("My touring bike carries panniers and my knees dislike long steep climbs.",
     "Then keep to the river path and avoid the hills east of Valence."),
    ("My partner Sam joins for the last two days, arriving by train in Valence.",
     "Meet Sam at the Valence station on the third morning."),
    ("We want to camp two nights and stay in a guesthouse on the other nights.",
     "There are campsites near Tournon and guesthouses in Orange."),
    ("Our budget is sixty euros a night for the guesthouses, breakfast included.",
     "That is realistic along the Rhone in May."),
    ("Please remind me which day Sam joins and where we should meet.",
     "Sam joins on day three, at the Valence train station."),
]


async def converse(session: ClientSession, thread: str) -> tuple[list[str], dict]:
    """`add_messages` turn after turn until the memory observes; every id stored, and the
    last answer."""
    stored: list[str] = []
    for k, (question, reply) in enumerate(TURNS):
        result = await session.call_tool("add_messages", {
            "threadId": thread, "resourceId": "alice",
            "messages": [{"role": "user", "content": question, "id": f"{thread}-u{k}"},
                         {"role": "assistant", "content": reply}]})
        assert not result.is_error, result.content
        answer = result.structured_content
        assert answer["ids"][0] == f"{thread}-u{k}" and len(answer["ids"]) == 2, answer
        stored += answer["ids"]
        if answer["observed"]:
            return stored, answer
    raise AssertionError(f"no observation after {len(TURNS)} turns")


async def exercise(session: ClientSession, thread: str) -> dict:
    """Everything one transport is asked; what it answered."""
    await session.initialize()
    listed = await session.list_tools()
    assert [t.name for t in listed.tools] == ["context", "recall", "search", "add_messages"]
    for tool in listed.tools:
        assert tool.input_schema["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)

    began = time.monotonic()
    stored, last = await converse(session, thread)
    print(f"{thread}: {len(stored) // 2} turns until observed, {time.monotonic() - began:.1f} s")
    again = await session.call_tool("add_messages", {  # the first message again, by its id: skipped
        "threadId": thread, "resourceId": "alice",
        "messages": [{"role": "user", "content": TURNS[0][0], "id": f"{thread}-u0"}]})
    assert not again.is_error and again.structured_content["ids"] == [] and \
        again.structured_content["skipped"] == [f"{thread}-u0"], again.structured_content

    context = await session.call_tool("context", {"threadId": thread, "resourceId": "alice"})
    assert not context.is_error, context.content
    window = context.structured_content
    observed = set(window["observedMessageIds"])
    assert f"{thread}-u0" in observed and "Avignon" in window["observations"], window["observations"]
    assert not observed & {m["id"] for m in window["messages"]}, window["messages"]
    assert observed | {m["id"] for m in window["messages"]} == set(stored)
    # The model's input: the observation in the system part, the observed message no more a message.
    system = json.dumps([c for c in window["chat"] if c["role"] == "system"])
    said = json.dumps([c for c in window["chat"] if c["role"] != "system"])
    assert "Avignon" in system and TURNS[0][0] not in said, window["chat"]

    recalled = await session.call_tool("recall", {"threadId": thread, "anchor": "start", "limit": 2})
    assert not recalled.is_error and f"{thread}-u0" in recalled.content[0].text, recalled.content

    found, deadline = None, time.monotonic() + 30
    while time.monotonic() < deadline:  # the search index is om serve's own consumer: until it has the group
        result = await session.call_tool("search", {"threadId": thread, "query": "cycling trip to Avignon"})
        assert not result.is_error, result.content
        found = result.structured_content
        if found["count"]:
            break
        await asyncio.sleep(0.3)
    assert found and found["count"] >= 1 and "Avignon" in found["results"], found
    print(f"{thread}: context, recall and search answered {time.monotonic() - began:.1f} s after the first turn")

    observations = await session.read_resource(f"omstream://threads/{thread}/observations")
    assert observations.contents[0].text == window["observations"]
    resource = await session.read_resource(f"omstream://threads/{thread}/context")
    assert json.loads(resource.contents[0].text)["observedMessageIds"] == window["observedMessageIds"]

    malformed = await session.call_tool("recall", {"threadId": thread, "page": "two"})
    unknown = await session.call_tool("context", {"threadId": "no-such-thread"})
    assert malformed.is_error and "page" in malformed.content[0].text, malformed.content
    assert unknown.is_error and "unknown thread" in unknown.content[0].text, unknown.content
    with pytest.raises(MCPError):
        await session.read_resource("omstream://threads/no-such-thread/observations")
    after = await session.call_tool("context", {"threadId": thread})  # still serving
    assert not after.is_error and after.structured_content["observations"] == window["observations"]
    return {"stored": stored, "turns": len(stored) // 2, "observed": last["observed"]}


def _om_mcp(env, *args: str) -> list[str]:
    return [sys.executable, "-m", "omstream.cli", "--config", str(env.config), "mcp", *args]


async def over_stdio(env, url: str, log) -> dict:
    params = StdioServerParameters(command=_om_mcp(env)[0], args=[*_om_mcp(env, "--url", url)[1:]],
                                   env={"OMSTREAM_TOKEN": ALICE, "OM_API_TOKENS": TOKENS, "PYTHONUNBUFFERED": "1"})
    with open(log, "w") as errors:
        async with stdio_client(params, errlog=errors) as (read, write), ClientSession(read, write) as session:
            return await exercise(session, "mcp-stdio")


async def http_status(url: str, token: str | None) -> int:
    headers = {"Accept": "application/json, text/event-stream", **({"Authorization": f"Bearer {token}"} if token else {})}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as r:
        return r.status


async def over_http(url: str) -> dict:
    assert await http_status(url, None) == 401 and await http_status(url, WRONG) == 401
    async with AsyncExitStack() as stack:
        alice = create_mcp_http_client(headers={"Authorization": f"Bearer {ALICE}"})
        await stack.enter_async_context(alice)
        read, write = await stack.enter_async_context(streamable_http_client(url, http_client=alice))
        session = await stack.enter_async_context(ClientSession(read, write))
        figures = await exercise(session, "mcp-http")

        bob = create_mcp_http_client(headers={"Authorization": f"Bearer {BOB}"})
        await stack.enter_async_context(bob)
        read, write = await stack.enter_async_context(streamable_http_client(url, http_client=bob))
        other = await stack.enter_async_context(ClientSession(read, write))
        await other.initialize()
        read_it = await other.call_tool("context", {"threadId": "mcp-http"})
        write_it = await other.call_tool("add_messages", {"threadId": "mcp-http", "resourceId": "bob",
                                                          "messages": [{"role": "user", "content": "mine now"}]})
        claim = await other.call_tool("add_messages", {"threadId": "bob-new", "resourceId": "alice",
                                                       "messages": [{"role": "user", "content": "as alice"}]})
        own = await other.call_tool("add_messages", {"threadId": "bob-own", "resourceId": "bob",
                                                     "messages": [{"role": "user", "content": "hello", "id": "b1"}]})
    assert read_it.is_error and "403 forbidden" in read_it.content[0].text, read_it.content
    assert write_it.is_error and "403 forbidden" in write_it.content[0].text, write_it.content
    assert claim.is_error and "may not write to resource 'alice'" in claim.content[0].text, claim.content
    assert not own.is_error and own.structured_content["ids"] == ["b1"], own.content
    return figures


def _wait_listening(proc: subprocess.Popen, log, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while "MCP on http://" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise TimeoutError(f"om mcp not listening: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)


def test_om_mcp_over_stdio_and_streamable_http(new_env, tmp_path, monkeypatch):
    monkeypatch.setenv("OM_API_TOKENS", TOKENS)
    env = new_env(options=om_options(observation={"messageTokens": 80, "bufferTokens": False},
                                     retrieval={"scope": "thread", "vector": True},
                                     settings={"embedder": "hash/64"}))
    env.start_worker()
    server = Server(env.settings, tmp_path / "serve.log")
    started = time.monotonic()
    http_log, proc = tmp_path / "mcp-http.log", None
    try:
        asyncio.run(server.ready())
        stdio = asyncio.run(over_stdio(env, server.url, tmp_path / "mcp-stdio.log"))
        port = free_port()
        with open(http_log, "w") as out:
            proc = subprocess.Popen(_om_mcp(env, "--transport", "http", "--port", str(port), "--url", server.url),
                                    stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        _wait_listening(proc, http_log)
        http = asyncio.run(over_http(f"http://127.0.0.1:{port}/mcp"))
        example = subprocess.run([sys.executable, str(EXAMPLE), "--config", str(env.config), "--url", server.url,
                                  "--thread", "mcp-example", "--resource", "alice"],
                                 env={**os.environ, "OMSTREAM_TOKEN": ALICE}, capture_output=True, text=True,
                                 timeout=120)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)
        server.stop()
    took = time.monotonic() - started
    # The example client, as its docstring runs it: it reaches an observation and reads it back.
    assert example.returncode == 0, (example.stdout, example.stderr[-3000:])
    assert re.search(r"^\[turn \d\] stored .*: [1-9]\d* messages observed", example.stdout, re.M), example.stdout
    assert "    | " in example.stdout and "a malformed call: isError=True" in example.stdout, example.stdout

    accepted = Counter((e.thread_id, e.data.message.id) for e in asyncio.run(events(env.settings))
                       if e.type == "om-message-accepted")
    for thread, figures in (("mcp-stdio", stdio), ("mcp-http", http)):
        ids = Counter(i for t, i in accepted if t == thread)
        assert ids == Counter(figures["stored"]) and set(ids.values()) == {1}, (thread, ids)
    assert not any(t == "mcp-http" and i not in http["stored"] for t, i in accepted)  # bob wrote nothing there
    print(f"stdio: observed after {stdio['turns']} turns ({stdio['observed']} messages); "
          f"http: after {http['turns']} turns ({http['observed']}); {took:.1f} s with om serve up")
