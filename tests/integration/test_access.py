"""Access control on the real broker (issue 27, acceptance 5): `om serve` with tokens, every GET
route of the app (taken from its router, so routes added later are tried too) asked without a
token, with a wrong one and with another resource's, by header and by query: 401/403 every time,
JSON, and nothing of the other resource in the body.  The token's owner reads the same thread."""

import asyncio
import json
import re

import aiohttp
import pytest

from omstream.api_tokens import TokenTable, grants_from_text
from omstream.client import OmClient
from omstream.client.om_client import ServerRefused
from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.web import build_web_app
from tests.helpers import message
from tests.integration.openapi_check import check_answer
from tests.integration.support import EventWatcher, Server

pytestmark = pytest.mark.integration

ALICE, BOB, ADMIN = "alice-token-0123456789", "bob-token-0123456789ab", "admin-token-0123456789"
WRONG = "wrong-token-0123456789"
TOKENS = f"{ALICE} = alice; {BOB} = bob; {ADMIN} = *"


def paths_of_every_route(settings, thread: str, *, public: bool = False) -> list[str]:
    """Every GET route `om serve`'s app has (only those marked public, with `public`), its thread
    variable filled in (others with 'x')."""
    app = build_web_app(ProjectionFeed(settings), tokens=TokenTable(grants_from_text(TOKENS)))
    paths = {re.sub(r"\{[^}]+\}", lambda m: thread if "thread" in m.group(0).lower() else "x", r.resource.canonical)
             for r in app.router.routes()
             if r.method == "GET" and (not public or getattr(r.handler, "om_access", None) == "public")}
    return sorted(paths)


async def fetch(url: str, token: str | None, *, query: bool = False, **params) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token and not query else {}
    if token and query:
        params["access_token"] = token
    sent = {"wait": "0", **params}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
        async with http.get(url, headers=headers, params=sent) as r:
            body = await r.read()
            check_answer("GET", url, r.status, r.headers, body, sent, headers_sent=headers)  # the OpenAPI document's
            return r.status, r.content_type, body.decode()


def test_every_route_refuses_a_missing_wrong_or_foreign_token(new_env, tmp_path, monkeypatch):
    env = new_env(100_000)
    env.start_worker()
    monkeypatch.setenv("OM_API_TOKENS", TOKENS)
    alice = [message(i, thread="alice-t").model_copy(update={"resource_id": "alice", "content": f"ALICE-PRIVATE {i}"})
             for i in range(3)]
    bob = [message(i, thread="bob-t").model_copy(update={"resource_id": "bob", "content": f"BOB-PRIVATE {i}"})
           for i in range(3)]
    paths = paths_of_every_route(env.settings, "alice-t")
    # Open to all: the health check and the dashboard's pages and files, which hold no data.
    public = paths_of_every_route(env.settings, "alice-t", public=True)
    assert {"/healthz", "/", "/threads/alice-t"} <= set(public), public
    tally = {401: 0, 403: 0, "filtered": 0}

    async def scenario():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            await client.send_messages(alice + bob)
            await watcher.wait_for(lambda evs: sum(e.type == "om-message-accepted" for e in evs) == 6)
        server = Server(env.settings, tmp_path / "serve.log")
        try:
            await server.ready()
            base = server.url
            # The data is there: its owner and '*' read it.
            status, _, body = await fetch(f"{base}/threads/alice-t/context", ALICE)
            assert status == 200 and "ALICE-PRIVATE" in body
            status, _, body = await fetch(f"{base}/threads", ADMIN, query=True)
            assert status == 200 and "alice-t" in body and "bob-t" in body
            # The client reads as its token allows: the window, and the feed it follows.
            reader = OmClient(env.settings, token=ALICE)
            window = await reader.context("alice-t", base_url=base, wait=0)
            feed = [e async for e in reader.events("alice-t", follow=False, base_url=base)]
            assert window is not None and "ALICE-PRIVATE" in str(window["messages"])
            assert sum(e.type == "om-message-accepted" for e in feed) == 3, [e.type for e in feed]
            with pytest.raises(ServerRefused, match="403"):
                await reader.context("bob-t", base_url=base, wait=0)
            for path in paths:
                if path in public:
                    status, _, body = await fetch(base + path, None)
                    assert status in (200, 404) and "PRIVATE" not in body and "alice" not in body.replace("alice-t", "")
                    continue
                for token, expected in ((None, 401), (WRONG, 401), (BOB, 403)):
                    for query in (False, True):
                        status, kind, body = await fetch(base + path, token, query=query)
                        assert "ALICE-PRIVATE" not in body and "alice" not in body.replace("alice-t", ""), (path, body)
                        if path in ("/threads", "/dashboard/activity") and token == BOB:  # filtered lists
                            assert status == 200 and json.loads(body)["threads"] and "bob-t" in body
                            tally["filtered"] += 1
                            continue
                        assert status == expected, (path, token, query, status, body)
                        assert kind == "application/json" and set(json.loads(body)) == {"error", "detail"}
                        tally[status] += 1
        finally:
            server.stop()
        return (tmp_path / "serve.log").read_text(errors="replace")

    log = asyncio.run(scenario())
    data = len(paths) - len(public)
    print(f"\n{len(paths)} GET routes {paths}, {len(public)} public: {tally[401]} × 401, {tally[403]} × 403, "
          f"{tally['filtered']} filtered lists; no body held the other resource's text")
    assert tally[401] == 4 * data and tally[403] + tally["filtered"] == 2 * data
    # The access log shows the requests, with the query's token masked.
    assert "access_token=***" in log
    for token in (ALICE, BOB, ADMIN, WRONG):
        assert token not in log, "a token reached the server's log"
