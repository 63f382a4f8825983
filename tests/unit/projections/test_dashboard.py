"""The dashboard's files as `om serve` serves them: every page and the files it names, nothing
else, public even with tokens (they hold no data: the data routes check the token)."""

import asyncio
import re

from aiohttp.test_utils import TestClient, TestServer

from omstream.api_tokens import TokenTable, grants_from_text
from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.dashboard import PAGES, STATIC
from omstream.projections.http.web import build_web_app
from omstream.settings import Settings

TOKEN = "admin-token-0123456789"


def fetch_all(paths: list[str], tokens: TokenTable | None = None) -> dict[str, tuple[int, str, str]]:
    async def scenario():
        client = TestClient(TestServer(build_web_app(ProjectionFeed(Settings()), tokens=tokens)))
        await client.start_server()
        try:
            out = {}
            for path in paths:
                r = await client.get(path)
                out[path] = (r.status, r.content_type, await r.text())
            return out
        finally:
            await client.close()
    return asyncio.run(scenario())


def test_pages_and_every_file_they_name_are_served_without_a_token():
    tokens = TokenTable(grants_from_text(f"{TOKEN} = *"))
    pages = fetch_all(["/", "/threads/t1"], tokens)
    assert pages["/"][:2] == (200, "text/html") and "threads.js" in pages["/"][2]
    assert pages["/threads/t1"][:2] == (200, "text/html") and "thread.js" in pages["/threads/t1"][2]
    named = {m for _, _, html in pages.values() for m in re.findall(r'(?:src|href)="(/static/[^"]+)"', html)}
    assert named == {f"/static/{name}" for name in STATIC}, named  # no file left unserved or unused
    files = fetch_all(sorted(named), tokens)
    for path, (status, kind, body) in files.items():
        assert status == 200 and kind == STATIC[path.rsplit("/", 1)[1]] and body.strip(), path
    # ...while the data the page reads stays behind the token.
    data = fetch_all(["/threads", "/threads/t1/context?asOf=1", "/threads/t1/events"], tokens)
    assert {p: s for p, (s, _, _) in data.items()} == dict.fromkeys(data, 401)
    assert len(PAGES) == 2


def test_nothing_but_the_named_files_is_reachable():
    answers = fetch_all(["/static/web.py", "/static/..%2Fweb.py", "/static/", "/static/index.html.bak"])
    for path, (status, kind, body) in answers.items():
        assert status == 404 and kind == "application/json" and "import" not in body, path
