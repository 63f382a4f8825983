"""How far the search index lags the events: `python -m bench.index_lag`.

    python -m bench.index_lag                          # 200 and 500 messages/s, 20 s each
    python -m bench.index_lag --rates 1000 --seconds 10 --embedder local/e5-small

What runs
    A single-node Kafka broker on free ports in a temporary directory and a fresh namespace
    (4 partitions, `bench.e2e_env.start_namespace`), and the search index of `om serve`
    (`projections.search.feed.start_search`: the embedder, its sqlite-vec index in the data
    directory, its own consumer of `<ns>.events`).  The events are the fold's: the conversation
    is folded offline with the engine's pure fold and the scripted observer and reflector
    (`bench.serve_restart.History`: 20 threads, ~100-token messages, a step after each user
    message, async buffering, `messageTokens` 3000), before the clock starts; then each
    message's events are produced to `<ns>.events` at the offered rate, keyed by memory key, as
    the worker writes them; `retrieval.vector` is on, so every observation cycle's text is an
    observation group (spec §12) to embed.

What is printed
    Per offered rate: events and groups produced, chunks embedded, and the lag of the index —
    for each event, the seconds from its append to `<ns>.events` (the record's timestamp) to the
    commit of the index batch that applied it — p50 / p99 / max over every event and over the
    events that carried groups, and how long the index took to drain after the last produce.
    The target (issue 29, acceptance 5): p99 under 5 s at the end-to-end bench's sustained rate
    (about 200 messages/s, README "Performance").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.e2e_env import Options, start_namespace
from bench.e2e_stats import percentile
from bench.serve_restart import History
from omstream import kafka
from omstream.projections.follower import Batch
from omstream.projections.search.embedding import DEFAULT_EMBEDDER, make_embedder
from omstream.projections.search.feed import start_search
from omstream.schemas.codec import encode
from omstream.schemas.config import load_om_config
from omstream.settings import Settings
from omstream.topics import Topics


def progress(text: str) -> None:
    print(f"[index_lag {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def with_retrieval(settings: Settings) -> Settings:
    """The namespace's settings with `retrieval.vector` on: the fold writes observation groups."""
    options = settings.om.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return replace(settings, om=load_om_config({**options, "retrieval": {"vector": True}}))


async def run_rate(root: Path, rate: int, seconds: float, threads: int, embedder_name: str,
                   drain_timeout: float) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        settings = with_retrieval(await start_namespace(root, stack, Options(), "lag"))
        history = History(settings, threads)
        total = int(rate * seconds)
        progress(f"{rate} messages/s: folding {total} messages offline")
        per_message = [[encode(e) for e in history._message_events(n)] for n in range(total)]
        carriers = sum(b'"type":"data-om-observation-end"' in v or b'"type":"data-om-activation"' in v
                       for events in per_message for v in events)
        search = await start_search(settings, make_embedder(embedder_name))
        lags: list[float] = []
        group_lags: list[float] = []

        def measure(batch: Batch) -> None:
            now = time.time()
            for records in batch.values():
                for _, value, timestamp in records:
                    lag = now - (timestamp or 0) / 1000
                    lags.append(lag)
                    if b"<observation-group " in value:
                        group_lags.append(lag)

        search.feed.listeners.append(measure)
        feed = asyncio.create_task(search.feed.run())
        topic = Topics.of(settings).events
        producer = kafka.producer(settings, linger_ms=5)
        await producer.start()
        try:
            progress(f"{rate} messages/s: producing {sum(map(len, per_message))} events for {seconds:.0f} s")
            started = time.perf_counter()
            pending = []
            for n, events in enumerate(per_message):
                due = started + n / rate
                if (wait := due - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)
                for value in events:
                    key = json.loads(value)["memoryKey"].encode()
                    pending.append(await producer.send(topic, value, key=key))
            await asyncio.gather(*pending)
            produced_at = time.perf_counter()
            sent = sum(map(len, per_message))
            drained: float | None = None
            while len(lags) < sent:  # the evidence: every produced event applied and committed
                if feed.done():
                    feed.result()
                if time.perf_counter() - produced_at > drain_timeout:
                    progress(f"the index applied {len(lags)} of {sent} events {drain_timeout:.0f} s after the last produce")
                    break
                await asyncio.sleep(0.05)
            else:
                drained = time.perf_counter() - produced_at
        finally:
            await producer.stop()
            feed.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feed
            entries = search.index.count()
            await search.close()
        return {
            "rate": rate, "seconds": seconds, "threads": threads, "embedder": embedder_name,
            "messages": total, "events": sent, "applied": len(lags), "group_events": carriers, "entries": entries,
            "lag_p50": percentile(lags, 50), "lag_p99": percentile(lags, 99), "lag_max": max(lags, default=None),
            "group_lag_p50": percentile(group_lags, 50), "group_lag_p99": percentile(group_lags, 99),
            "drained_s": drained, "drain_timeout_s": drain_timeout,
        }


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="200,500", help="offered messages/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    parser.add_argument("--drain-timeout", type=float, default=120.0,
                        help="seconds to wait for the index after the last produce")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    results = []
    for rate in [int(r) for r in args.rates.split(",")]:
        with tempfile.TemporaryDirectory(prefix="om-index-lag-") as root:
            results.append(asyncio.run(run_rate(Path(root), rate, args.seconds, args.threads, args.embedder,
                                                args.drain_timeout)))
        r = results[-1]
        drained = (f"drained {r['drained_s']:.2f} s after the last produce" if r["drained_s"] is not None else
                   f"NOT drained: {r['applied']} of {r['events']} events applied {r['drain_timeout_s']:.0f} s after "
                   "the last produce (the lags are of those)")
        print(f"index lag at {r['rate']} messages/s ({r['embedder']}, {r['threads']} threads, {r['seconds']:.0f} s): "
              f"{r['events']} events, {r['group_events']} with groups, {r['entries']} chunks indexed; "
              f"lag p50 / p99 / max {_s(r['lag_p50'])} / {_s(r['lag_p99'])} / {_s(r['lag_max'])} s; "
              f"group events p50 / p99 {_s(r['group_lag_p50'])} / {_s(r['group_lag_p99'])} s; {drained}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
