"""Embedders compared on LoCoMo retrieval: `python -m bench.embedders [--samples 0-4] [EMBEDDER...]`.

Per conversation, every dialogue turn (`Speaker: text`) is a passage and every question with
evidence a query; a question is a hit when one of its evidence turns is among the 10 passages
nearest to it (cosine).  Printed per embedder: hit@10, hit@5, and the seconds to embed the
passages (2 cores shared).  The data set is read from `--data` (its licence keeps it out of this
repository); conversations 0-4 are the development set, 5-9 held out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import numpy as np

from bench.quality import DEFAULT_DATA as DATA  # ../shared/data/locomo/locomo10.json
from omstream.projections.search.embedding import make_embedder


def _samples(spec: str) -> list[int]:
    first, _, last = spec.partition("-")
    return list(range(int(first), int(last or first) + 1))


async def measure(name: str, samples: list[dict]) -> dict[str, float]:
    embedder = make_embedder(name)
    await embedder.embed(["warm up"])  # the model's load is not the embedding's cost
    hits5 = hits10 = questions = passages = 0
    seconds = 0.0
    for sample in samples:
        conversation = sample["conversation"]
        turns = [turn for key, value in conversation.items()
                 if key.startswith("session_") and isinstance(value, list) for turn in value]
        ids = [turn["dia_id"] for turn in turns]
        started = time.perf_counter()
        vectors = await embedder.embed([f"{t['speaker']}: {t['text']}" for t in turns])
        seconds += time.perf_counter() - started
        passages += len(turns)
        asked = [qa for qa in sample["qa"] if qa.get("evidence")]
        queries = await embedder.embed([qa["question"] for qa in asked], query=True)
        for qa, order in zip(asked, np.argsort(-(queries @ vectors.T), axis=1), strict=True):
            evidence = set(qa["evidence"])
            hits10 += any(ids[i] in evidence for i in order[:10])
            hits5 += any(ids[i] in evidence for i in order[:5])
            questions += 1
    return {"hit@10": hits10 / questions, "hit@5": hits5 / questions, "questions": questions,
            "passages": passages, "embed_seconds": seconds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("embedders", nargs="*", default=["local/wordllama", "local/e5-small", "hash/256"])
    parser.add_argument("--samples", default="0-4", help="conversations, e.g. 0-4 (development) or 5-9")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    data = json.loads(args.data.read_text())
    samples = [data[i] for i in _samples(args.samples)]
    for name in args.embedders:
        figures = asyncio.run(measure(name, samples))
        print(json.dumps({"embedder": name, "samples": args.samples, **{
            k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}}), flush=True)


if __name__ == "__main__":
    main()
