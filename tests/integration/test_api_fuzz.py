"""The API fuzzer against a live `om serve`: schemathesis reads the served OpenAPI document and
sends generated requests, valid and malformed (ids, query strings, bodies, headers), to every
operation of a namespace with a worker and some threads.

What must hold: no 5xx, no request over the response-time limit (a hang), and every answer is
the document's (status, content type, headers, body schema), checked by schemathesis and again
here with openapi-core over the recorded exchanges (tests/integration/openapi_check.py); a
malformed request gets a 4xx (`negative_data_rejection`).  The figures (requests, statuses,
5xx) are printed for CI's log.  The two long-by-design parameters (`wait`, `follow`) are bounded
by tests/integration/fuzz_hooks.py.

    python -m pytest tests/integration/test_api_fuzz.py -q
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from omstream.client import OmClient
from tests.helpers import message
from tests.integration.openapi_check import check_answer
from tests.integration.support import EventWatcher, Server

pytestmark = pytest.mark.integration

TOKEN = "fuzz-admin-token-0123456789"
THREADS = ("fz-a", "fz-b", "fz-c")
CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance", "negative_data_rejection")
MAX_EXAMPLES = int(os.environ.get("OM_FUZZ_EXAMPLES", "15"))  # per operation and phase
RUN_TIMEOUT = 150.0  # the whole run; schemathesis' own budget (--max-time) is well inside it


def fuzz(url: str, out: Path) -> tuple[int, str, float]:
    """Run the schemathesis CLI against the live server: its exit code, output and duration."""
    import subprocess

    command = [sys.executable, "-m", "schemathesis.cli", "run", f"{url}/openapi.json",
               "--phases", "examples,coverage,fuzzing", "--max-examples", str(MAX_EXAMPLES),
               "--request-timeout", "10", "--max-response-time", "5",
               "--checks", ",".join(CHECKS), "--header", f"Authorization: Bearer {TOKEN}",
               "--seed", "39", "--no-color", "--workers", "1",
               "--report", "har", "--report-har-path", str(out / "fuzz.har")]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.integration.fuzz_hooks",
           "OM_FUZZ_THREADS": ",".join(THREADS), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    started = time.monotonic()
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def exchanges(har: Path) -> list[dict]:
    return json.loads(har.read_text())["log"]["entries"]


def body_of(entry: dict) -> bytes:
    content = entry["response"].get("content", {})
    text = content.get("text") or ""
    return base64.b64decode(text) if content.get("encoding") == "base64" else text.encode()


def test_the_fuzzer_gets_no_server_error_and_only_documented_answers(new_env, tmp_path, monkeypatch):
    env = new_env(message_tokens=600)  # small enough that the threads get observed
    env.start_worker()
    monkeypatch.setenv("OM_API_TOKENS", f"{TOKEN} = *")
    messages = [message(i, thread=t, words=40) for t in THREADS for i in range(6)]

    async def scenario() -> tuple[int, str, float]:
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            await client.send_messages(messages)
            await watcher.wait_for(lambda evs: sum(e.type == "om-message-accepted" for e in evs) == len(messages))
        server = Server(env.settings, tmp_path / "serve.log")
        try:
            await server.ready()
            return await asyncio.to_thread(fuzz, server.url, tmp_path)
        finally:
            server.stop()

    code, output, took = asyncio.run(scenario())
    entries = exchanges(tmp_path / "fuzz.har")
    statuses = Counter(e["response"]["status"] for e in entries)
    operations = {(e["request"]["method"], urlsplit(e["request"]["url"]).path) for e in entries}
    server_errors = sum(n for status, n in statuses.items() if status >= 500)
    no_answer = statuses.get(0, 0)  # HAR's status of a request that timed out or lost its connection
    print(f"api fuzzer: {len(entries)} requests to {len(operations)} method+path pairs in {took:.0f} s; "
          f"5xx {server_errors}, no answer {no_answer}; by status {dict(sorted(statuses.items()))}")
    assert code == 0, output[-6000:]
    assert server_errors == 0 and no_answer == 0, output[-6000:]
    assert len(entries) >= 100 and {s for s in statuses if 400 <= s < 500}, statuses  # it did fuzz
    # Every recorded answer again, with openapi-core (the integration tests' own checker).
    for entry in entries:
        request, response = entry["request"], entry["response"]
        headers = {h["name"]: h["value"] for h in response["headers"]}
        check_answer(request["method"], request["url"], response["status"], headers, body_of(entry),
                     dict(parse_qsl(urlsplit(request["url"]).query)))
