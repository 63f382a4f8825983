"""The access middleware and the JSON errors of `om serve`, without a broker: a feed holding
three threads (alice's, bob's, one without a resource), the app's routes taken from its router
(so a route added later is tried too), every refusal checked for status, shape and leaks."""

import asyncio
import json
import re

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from omstream.api_tokens import TokenTable, grants_from_text
from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.access import AccessRefused, token_table
from omstream.projections.http.web import build_web_app
from omstream.settings import Settings, SettingsError
from tests.helpers import message

ALICE, BOB, ADMIN, WRONG = "alice-token-0123456789", "bob-token-0123456789ab", "admin-token-0123456789", "nobody-token-0123456789"
TOKENS = f"{ALICE} = alice; {BOB} = bob, carol; {ADMIN} = *"


def feed_with_threads() -> ProjectionFeed:
    feed = ProjectionFeed(Settings())
    feed.ready = True
    for thread, resource in (("alice-t", "alice"), ("bob-t", "bob"), ("orphan-t", None)):
        m = message(0, thread=thread).model_copy(update={
            "resource_id": resource, "content": f"SECRET-OF-{thread.upper()}"})
        feed.projection.view(thread).messages[m.id] = m
    return feed


def app_with_later_routes(tokens: TokenTable | None) -> web.Application:
    """The app with two routes added after it was built, as the live feed adds its own."""
    app = build_web_app(feed_with_threads(), tokens=tokens)

    async def later(request: web.Request) -> web.Response:
        return web.json_response({"later": request.match_info.get("thread_id"), "all": "SECRET-OF-EVERYONE"})

    async def broken(_: web.Request) -> web.Response:
        raise RuntimeError("SECRET-TRACEBACK-TEXT")

    app.router.add_get("/threads/{thread_id}/later", later)
    app.router.add_get("/everything-later", later)
    app.router.add_get("/broken", broken)
    return app


def get_paths(app: web.Application, thread: str) -> list[str]:
    """Every GET route of the app, its thread variable filled in (others with 'x')."""
    paths = []
    for route in app.router.routes():
        if route.method == "GET":
            canonical = route.resource.canonical
            paths.append(re.sub(r"\{[^}]+\}", lambda m: thread if "thread" in m.group(0).lower() else "x", canonical))
    return sorted(set(paths))


def public_paths(app: web.Application, thread: str) -> set[str]:
    """The GET routes marked `public`, filled in as `get_paths` does."""
    return {re.sub(r"\{[^}]+\}", lambda m: thread if "thread" in m.group(0).lower() else "x", route.resource.canonical)
            for route in app.router.routes()
            if route.method == "GET" and getattr(route.handler, "om_access", None) == "public"}


def run(app: web.Application, scenario) -> None:
    async def main():
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            await scenario(client)
        finally:
            await client.close()
    asyncio.run(main())


async def fetch(client: TestClient, path: str, token: str | None = None, *, query: bool = False,
                method: str = "GET", **params) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token and not query else {}
    if token and query:
        params["access_token"] = token
    r = await client.request(method, path, headers=headers, params={"wait": "0", **params})
    return r.status, r.content_type, await r.text()


def test_every_route_refuses_a_missing_wrong_or_foreign_token_as_json_and_shows_nothing():
    app = app_with_later_routes(TokenTable(grants_from_text(TOKENS)))
    paths = get_paths(app, "alice-t")
    assert "/threads/alice-t/context" in paths and "/threads/alice-t/later" in paths, paths
    counts = {401: 0, 403: 0}

    public = public_paths(app, "alice-t")
    assert {"/healthz", "/", "/threads/alice-t"} <= public, public

    async def scenario(client):
        for path in paths:
            if path in public:
                # Open to all (health, the dashboard's pages and files), and holding no data.
                status, _, body = await fetch(client, path)
                assert status in (200, 404) and "SECRET" not in body, (path, status)
                continue
            for token, expected in ((None, 401), (WRONG, 401), (BOB, 403)):
                for query in (False, True):
                    status, kind, body = await fetch(client, path, token, query=query)
                    if path in ("/threads", "/dashboard/activity") and token == BOB:
                        # The lists answer bob with bob's threads only.
                        assert status == 200 and "alice" not in body and "bob-t" in body, body
                        continue
                    assert status == expected, (path, token, status, body)
                    assert kind == "application/json" and set(json.loads(body)) == {"error", "detail"}
                    # Nothing of the thread but the id the request named; not even its resource.
                    assert "SECRET" not in body and "alice" not in body.replace("alice-t", ""), body
                    counts[status] += 1
        status, _, body = await fetch(client, "/threads", ALICE)
        assert status == 200 and "alice-t" in body and "bob-t" not in body and "orphan" not in body

    run(app, scenario)
    print(f"\n{len(paths)} GET routes; refusals: {counts[401]} × 401, {counts[403]} × 403")
    assert counts[401] > 0 and counts[403] > 0


def test_a_token_reads_its_resources_and_star_reads_all():
    app = app_with_later_routes(TokenTable(grants_from_text(TOKENS)))

    async def scenario(client):
        assert (await fetch(client, "/threads/alice-t/context", ALICE))[0] == 200
        assert (await fetch(client, "/threads/alice-t/later", ALICE, query=True))[0] == 200
        assert (await fetch(client, "/threads/bob-t/context", ALICE))[0] == 403
        # A thread whose messages name no resource: '*' only.
        assert (await fetch(client, "/threads/orphan-t/context", ALICE))[0] == 403
        assert (await fetch(client, "/threads/orphan-t/context", ADMIN))[0] == 200
        # Namespace-wide routes need '*'.
        assert (await fetch(client, "/everything-later", BOB))[0] == 403
        assert (await fetch(client, "/everything-later", ADMIN))[0] == 200
        status, _, body = await fetch(client, "/threads", ADMIN)
        assert status == 200 and all(t in body for t in ("alice-t", "bob-t", "orphan-t"))
        # Another route's parameters are its own to judge (the feed's `after` is a seq).
        assert (await fetch(client, "/threads/alice-t/later", ALICE, after="42", wait="x"))[0] == 200
        # A restricted token on a thread nobody has: 404, the handler never runs.
        status, _, body = await fetch(client, "/threads/ghost/later", ALICE)
        assert status == 404 and '"unknown-thread"' in body
        # Another scheme is no token.
        r = await client.get("/threads/alice-t/context", headers={"Authorization": f"Basic {ALICE}"})
        assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")

    run(app, scenario)


def test_without_tokens_nothing_is_checked():
    app = app_with_later_routes(None)

    async def scenario(client):
        for path in ("/threads", "/threads/alice-t/context", "/threads/orphan-t/later", "/everything-later"):
            assert (await fetch(client, path))[0] == 200, path

    run(app, scenario)


def errors_seen(tokens: TokenTable | None, token: str | None) -> dict[str, tuple[int, str, str]]:
    app, seen = app_with_later_routes(tokens), {}

    async def scenario(client):
        seen["route"] = await fetch(client, "/no/such/route", token)
        seen["method"] = await fetch(client, "/threads", token, method="POST")
        seen["wait"] = await fetch(client, "/threads/alice-t/context", token, wait="soon")
        seen["after"] = await fetch(client, "/threads/alice-t/context", token, after="zero")
        seen["thread"] = await fetch(client, "/threads/nope/context", token)
        seen["version"] = await fetch(client, "/threads/alice-t/context", token, version="Bad Name")
        seen["broken"] = await fetch(client, "/broken", token)

    run(app, scenario)
    return seen


@pytest.mark.parametrize("tokens", [None, TokenTable(grants_from_text(TOKENS))], ids=["open", "tokens"])
def test_errors_are_json_with_a_code_and_no_traceback(tokens):
    seen = errors_seen(tokens, ADMIN if tokens else None)
    got = {k: (status, json.loads(body)["error"]) for k, (status, kind, body) in seen.items()
           if kind == "application/json"}
    assert got == {"route": (404, "unknown-route"), "method": (405, "method-not-allowed"),
                   "wait": (400, "bad-parameter"), "after": (400, "bad-parameter"),
                   "thread": (404, "unknown-thread"), "version": (400, "bad-parameter"),
                   "broken": (500, "internal")}, seen
    assert "SECRET-TRACEBACK-TEXT" not in seen["broken"][2] and "Traceback" not in seen["broken"][2]
    assert "GET" in json.loads(seen["method"][2])["detail"]


def test_a_network_address_needs_tokens(tmp_path):
    assert token_table(Settings()) is None  # loopback without tokens: the default, unchanged
    assert token_table(Settings(web_host="::1")) is None
    with pytest.raises(AccessRefused, match="OM_API_TOKENS"):
        token_table(Settings(web_host="0.0.0.0"))
    file = tmp_path / "tokens"
    file.write_text(f"# who reads what\n\n{ALICE} = alice\n{BOB} = *\n")
    table = token_table(Settings(web_host="0.0.0.0", api_tokens=grants_from_text(f"{ALICE} = dave"),
                                 api_tokens_file=str(file)))
    assert table is not None and len(table) == 2 and ALICE not in repr(table)
    assert table.grant(ALICE).resources == {"alice", "dave"} and table.grant(BOB).everything
    assert table.grant(WRONG) is None
    file.write_text(f"{ALICE} = alice\nshort = bob\n")
    with pytest.raises(SettingsError) as caught:
        token_table(Settings(api_tokens_file=str(file)))
    assert str(caught.value).startswith(f"{file}: line 2: a token is 16") and "short" not in str(caught.value)


def test_a_restricted_token_reads_its_own_first_write_with_after():
    """The thread does not exist when the request comes; `after=` waits for it, then checks."""
    from omstream.engine.fold import fold, new_state
    from omstream.schemas.codec import encode
    from tests.helpers import engine

    out = fold(new_state("thread:new-t", "new-t", "u1"), message(0, thread="new-t"), engine(100_000))
    last = len(out.events) - 1
    raws = [encode(e.model_copy(update={"input_offset": 5, "input_last": True if i == last else None}))
            for i, e in enumerate(out.events)]
    feed = ProjectionFeed(Settings())
    feed.ready = True
    owner, other = "u1-token-0123456789abc", "u2-token-0123456789abc"
    app = build_web_app(feed, tokens=TokenTable(grants_from_text(f"{owner} = u1; {other} = u2")))

    async def scenario(client):
        async def fold_later():
            await asyncio.sleep(0.3)
            for raw in raws:
                feed._apply(0, raw)
            async with feed.changed:
                feed.changed.notify_all()

        later = asyncio.create_task(fold_later())
        status, _, body = await fetch(client, "/threads/new-t/context", owner, after="0:5", wait="5")
        await later
        assert status == 200 and json.loads(body)["stale"] is False and "new-t-m0" in body
        status, _, body = await fetch(client, "/threads/new-t/context", other, after="0:5", wait="5")
        assert status == 403 and "new-t-m0" not in body

    run(app, scenario)


async def test_a_version_opened_while_the_broker_is_unreachable_is_a_503_with_retry_after():
    # Nothing listens on port 1: the read side cannot open another version's projection. It says
    # so in the error set's shape (it was a 500 `internal` before), and keeps serving its own.
    feed = feed_with_threads()
    feed.settings = Settings(bootstrap="127.0.0.1:1")
    async with TestClient(TestServer(build_web_app(feed))) as client:
        answer = await client.get("/threads/orphan-t/context?version=v2")
        assert answer.status == 503 and answer.headers["Retry-After"] == "5"
        body = await answer.json()
        assert body["error"] == "unavailable" and "broker cannot be reached" in body["detail"]
        assert (await client.get("/threads/orphan-t/context")).status == 200
