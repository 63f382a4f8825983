"""The cost of crypto-shredding's envelopes: sealing and opening typical records, per CPU second.

    python -m bench.crypto                  # about 10 s
    python -m bench.crypto --seconds 1 --json

What is measured
    CPU time (`time.process_time`, one thread) of `encrypt_fields` + `decrypt_fields` over the
    JSON dict of a record, in both modes (`om1`: AES-GCM with a random nonce, as a producer
    seals; `om1d`: AES-GCM-SIV with a derived nonce, as the worker would seal its outputs), for:

    * a ~500-token text message (about 2,000 characters);
    * a message of parts: text, a tool call with arguments and its result;
    * the `om-message-accepted` event of the text message (the worker's output per message);

    beside the baseline every record already pays on the worker: `orjson` encode + decode of the
    same dict.  The key is at hand (a `KeyRing` lookup is a dict lookup once cached).

Why
    Issue 31 sets a budget: encryption must cost under 15 % of the end-to-end throughput.  Per
    message the pipeline would open one envelope (the message at intake) and seal one (the
    accepted event), so `1 / rate` of a seal-and-open pair bounds the CPU added per message.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import orjson

from omstream.crypto import DataKey, decrypt_fields, encrypt_fields

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()


def _text(chars: int) -> str:
    out, i = [], 0
    while sum(map(len, out)) + len(out) < chars:
        out.append(WORDS[(i * 7) % len(WORDS)])
        i += 1
    return " ".join(out)


def records() -> dict[str, dict[str, Any]]:
    text = {"type": "message", "id": "m1", "threadId": "t1", "resourceId": "u1", "role": "user",
            "content": _text(2000), "createdAt": "2025-03-03T09:00:00.000Z"}
    parts = {**text, "id": "m2", "role": "assistant", "content": [
        {"type": "text", "text": _text(600)},
        {"type": "tool-call", "toolCallId": "c1", "toolName": "search", "args": {"q": _text(80), "k": 5}},
        {"type": "tool-result", "toolCallId": "c1", "toolName": "search", "result": [_text(200)] * 3},
    ]}
    accepted = {"type": "om-message-accepted", "eventId": "thread:t1:7", "memoryKey": "thread:t1",
                "threadId": "t1", "seq": 7, "eventTime": "2025-03-03T09:00:00.000Z", "data": {"message": text}}
    return {"text message (~500 tokens)": text, "message of parts (text, tool call, result)": parts,
            "om-message-accepted event": accepted}


def rate(work: Callable[[], object], seconds: float) -> float:
    """Calls per CPU second, over about `seconds`."""
    n, start = 0, time.process_time()
    while (spent := time.process_time() - start) < seconds:
        for _ in range(50):
            work()
        n += 50
    return n / spent


class _Keys:
    def __init__(self, key: DataKey) -> None:
        self._key = key

    def key(self, key_id: str) -> DataKey:
        return self._key


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.crypto", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="CPU seconds per figure")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    key = DataKey("bench", "thread:t1", os.urandom(32))
    keys = _Keys(key)
    rows = []
    for name, record in records().items():
        size = len(orjson.dumps(record))
        base = rate(lambda r=record: orjson.loads(orjson.dumps(r)), args.seconds)
        row = {"record": name, "bytes": size, "json_per_s": round(base)}
        for mode, context in (("om1", None), ("om1d", b"thread:t1:7")):
            sealed = encrypt_fields(record, key, context=context)
            row[f"{mode}_bytes"] = len(orjson.dumps(sealed))
            row[f"{mode}_per_s"] = round(rate(lambda r=record, c=context: decrypt_fields(
                encrypt_fields(r, key, context=c), "thread:t1", keys), args.seconds))
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'seal + open, per CPU second (one core)':<46}{'bytes':>7}{'json':>9}{'om1':>9}{'om1d':>9}"
          f"{'om1 bytes':>11}")
    for r in rows:
        print(f"{r['record']:<46}{r['bytes']:>7}{r['json_per_s']:>9,}{r['om1_per_s']:>9,}{r['om1d_per_s']:>9,}"
              f"{r['om1_bytes']:>11}")


if __name__ == "__main__":
    main()
