"""The sealed path end to end on the broker: a sealed `OmClient`, the fold and the model agent of
a worker with the same namespace key.  Every job, result and cache entry is sealed, the fold
folds the sealed answers (signature over the sealed bytes), nothing is dead-lettered; after one
thread is deleted, a replay under the live configuration calls no model and hits the cache for
every job of the thread that lives, and for none of the deleted one's.
"""

import asyncio
import time
from datetime import UTC, datetime

import orjson
import pytest

from omstream.client import OmClient
from omstream.schemas.control import ThreadDeleted
from tests.helpers import message
from tests.integration.options import om_options
from tests.integration.support import read_all
from tests.integration.test_replay import run_replay

pytestmark = pytest.mark.integration

KEY = "an-integration-test-namespace-key-" + "x" * 32


def test_sealed_pipeline_and_a_replay_after_a_deletion(new_env):
    env = new_env(options=om_options(observation={"messageTokens": 1000, "bufferTokens": False},
                                     settings={"namespace_key": KEY}))
    settings, ns = env.settings, env.settings.namespace
    env.start_worker()

    async def live() -> tuple[list, ...]:
        async with OmClient(settings) as client:
            for i in range(30):
                await client.send_messages([message(i, thread="alpha", words=80),
                                            message(i, thread="beta", words=80)])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = [r for r in await read_all(settings, ns + ".events", idle=0.5)
                    if b"data-om-observation-end" in r.value]
            if len(done) >= 6:
                break
            await asyncio.sleep(1)
        return tuple([await read_all(settings, f"{ns}.{t}", idle=0.5) for t in ("log", "jobs", "cache", "dlq")])

    log, jobs, cache, dlq = asyncio.run(live())
    results = [orjson.loads(r.value) for r in log if b'"model-result"' in r.value]
    assert len(results) == len(jobs) == len(cache) == 6, env.logs()
    assert all(r["ok"] and r["omSealed"] == 1 and r["output"].startswith("om1:") for r in results)
    assert all(orjson.loads(j.value)["omSealed"] == 1 for j in jobs)
    assert all(c.value.startswith(b'"om1:') for c in cache)  # sealed whole, under HMAC keys
    assert not {c.key.decode() for c in cache} & {orjson.loads(j.value)["requestHash"] for j in jobs}
    assert dlq == []

    async def delete_alpha() -> None:
        async with OmClient(settings) as client:
            await client.send_control(ThreadDeleted(thread_id="alpha", at=datetime.now(UTC)))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(b"om-memory-deleted" in r.value for r in await read_all(settings, ns + ".events", idle=0.5)):
                return
            await asyncio.sleep(1)

    asyncio.run(delete_alpha())
    same = run_replay(env.config, "same")
    print(f"sealed replay under the live configuration, alpha deleted: {same}")
    beta_jobs = sum(1 for j in jobs if j.key == b"thread:beta")
    assert (same["modelCalls"], same["cacheHits"]) == (0, beta_jobs)
