"""How fast records reach the fold agent: the worker's intake (its Faust consumer handing each
fetch to an `Intake`, fair batches, each record acked, nothing folded) against aiokafka's
`getmany` alone, on one
partition of a broker this benchmark starts.  Not a timed test: it prints records/s and CPU
(aiokafka's timed from its first fetch, Faust's from its first batch, which favours Faust).

    python -m bench.delivery [--records 20000] [--size 1300]

This is the ceiling of the worker's intake: the fold, the store and the sends come on top.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from aiokafka.admin import NewTopic

from omstream import kafka
from omstream.infra.broker import Broker, free_port

TOPIC = "delivery"
KEYS = 10  # records spread over this many memory keys


async def produce(bootstrap: str, records: int, size: int) -> None:
    admin = kafka.admin(bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, 1, 1)])
    finally:
        await admin.close()
    producer = kafka.producer(bootstrap, linger_ms=5, max_batch_size=512 * 1024)
    await producer.start()
    try:
        value = b"x" * size
        sent = [await producer.send(TOPIC, value, key=b"thread:%d" % (i % KEYS)) for i in range(records)]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def read_with_aiokafka(bootstrap: str, records: int) -> tuple[float, float]:
    """Seconds and CPU seconds from the first fetch to the last record."""
    consumer = kafka.reader(bootstrap, TOPIC, auto_offset_reset="earliest", fetch_max_wait_ms=20)
    await consumer.start()
    try:
        await consumer.seek_to_beginning()
        seen, started, cpu = 0, time.perf_counter(), time.process_time()
        while seen < records:
            batch = await consumer.getmany(timeout_ms=1000)
            seen += sum(map(len, batch.values()))
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        await consumer.stop()


def faust_worker(bootstrap: str, records: int, data: str) -> None:
    """Runs in a child process (Faust's worker owns its process): the worker's own app classes
    and batching, acking each record as the fold agent does, then prints and exits."""
    from omstream.worker.app import BACKLOG_BYTES, BACKLOG_RECORDS, MAX_FETCH_BYTES, STREAM_BUFFER
    from omstream.worker.backlog import Backlog, Intake
    from omstream.worker.faust_repairs import WorkerApp, WorkerTopic

    app = WorkerApp("delivery-bench", broker=f"kafka://{bootstrap}", store="memory://", datadir=data,
                    topic_allow_declare=False, topic_disable_leader=True, web_enabled=False,
                    key_serializer="raw", value_serializer="raw", consumer_auto_offset_reset="earliest",
                    Topic=WorkerTopic, stream_buffer_maxsize=STREAM_BUFFER, consumer_max_fetch_size=MAX_FETCH_BYTES)
    topic = app.topic(TOPIC, key_type=bytes, value_type=bytes)
    intake = Intake(Backlog(BACKLOG_RECORDS, BACKLOG_BYTES))
    app.taps[TOPIC] = intake.put

    @app.agent(topic)
    async def sink(stream):
        seen, batches, started, cpu = 0, 0, 0.0, 0.0
        async for batch in intake.batches(500, 32, 0.005, lambda: app.consumer_generation_id):
            if not started:
                started, cpu = time.perf_counter(), time.process_time()
            for message in batch:
                app.consumer.ack(message)
            seen, batches = seen + len(batch), batches + 1
            if seen >= records:
                took, used = time.perf_counter() - started, time.process_time() - cpu
                # Faust's worker sends print() to its log: write to the real stdout.
                print(f"faust (the worker's path): {seen:,} records in {took:.2f} s = {seen / took:,.0f}/s, "
                      f"{batches} batches, {used * 1e6 / seen:.0f} us CPU per record",
                      file=sys.__stdout__, flush=True)
                os._exit(0)

    # Faust's `worker` command starts its web server whatever `web_enabled` says (on 0.0.0.0:6066:
    # two of these benches at once collided there); the bench serves nothing.
    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web"]
    app.main()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.delivery", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000, help="records to deliver (default 20000)")
    parser.add_argument("--size", type=int, default=1300, help="bytes per record (default 1300)")
    parser.add_argument("--faust-worker", nargs=2, metavar=("BOOTSTRAP", "DATA"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.faust_worker:
        faust_worker(args.faust_worker[0], args.records, args.faust_worker[1])
        return 1  # not reached: the worker exits once it has every record
    root = Path(tempfile.mkdtemp(prefix="omstream-delivery-"))
    broker = Broker(root / "kafka", port=free_port(), controller_port=free_port())
    print(f"starting a broker on {broker.bootstrap} (data in {root})", flush=True)
    broker.start()
    try:
        asyncio.run(broker.wait_ready(timeout=120))
        asyncio.run(produce(broker.bootstrap, args.records, args.size))
        took, used = asyncio.run(read_with_aiokafka(broker.bootstrap, args.records))
        print(f"aiokafka getmany: {args.records:,} records in {took:.2f} s = {args.records / took:,.0f}/s, "
              f"{used * 1e6 / args.records:.0f} us CPU per record", flush=True)
        done = subprocess.run([sys.executable, "-m", "bench.delivery", "--records", str(args.records),
                               "--faust-worker", broker.bootstrap, str(root / "faust")], timeout=600)
        return 0 if done.returncode == 0 else 1
    finally:
        broker.stop()


if __name__ == "__main__":
    raise SystemExit(main())
