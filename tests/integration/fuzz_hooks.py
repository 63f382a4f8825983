"""Schemathesis hooks for the API fuzzer (tests/integration/test_api_fuzz.py), loaded by the CLI
through `SCHEMATHESIS_HOOKS`.

Two documented parameters ask the server to take long on purpose: `wait` (seconds a reader
waits for its write, up to 300) and `follow` (a feed that follows on forever unless `false`).
A request that uses them as documented is no hang, but it would spend the fuzzer's time budget,
so each call gets `wait` of at most 1 (also where it was left at its default of 10) and
`follow=false`, and only when the generated value is
one the server takes (a malformed `wait` or `follow` is sent as generated: its 400 is the point).
Some generated thread ids are swapped for a thread the namespace has (`OM_FUZZ_THREADS`), so the
handlers behind the thread lookup are reached too, not only the 404.
"""

from __future__ import annotations

import math
import os
import zlib
from typing import Any

import schemathesis

FEEDS = ("/events", "/threads/{threadId}/events")
WAITING = ("/threads/{threadId}/context", "/threads/{threadId}/recall")  # the routes with `wait`
KNOWN = [t for t in os.environ.get("OM_FUZZ_THREADS", "").split(",") if t]


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    query = case.query if isinstance(case.query, dict) else None
    if query is not None:
        if "wait" not in query and case.operation.path in WAITING:
            query["wait"] = 1  # the default is 10 s
        wait = _finite(query.get("wait")) if "wait" in query else None
        if wait is not None and wait > 1:
            query["wait"] = 1
        if case.operation.path in FEEDS and str(query.get("follow", "true")).lower() in ("true", "1"):
            query["follow"] = "false"
    params = case.path_parameters if isinstance(case.path_parameters, dict) else None
    if KNOWN and params and isinstance(params.get("threadId"), str):
        # Two generated ids in three become a known thread, chosen by the id (reproducible).
        pick = zlib.crc32(params["threadId"].encode("utf-8", "surrogatepass"))
        if pick % 3:
            params["threadId"] = KNOWN[pick % len(KNOWN)]
