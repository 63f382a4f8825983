"""Fold benchmark: messages/s and tokens/s per core, for ~500-token chat messages.

What is measured
    CPU time spent inside `omstream.engine.fold.fold` only (`time.process_time`, so other load
    on the machine does not inflate it), in one process on one thread, i.e. one core, for a
    synthetic conversation of ~500-token messages (tiktoken o200k_base count):

    * `raw count_message`: the token counter alone over the same messages, the baseline;
    * `fold ingest`: messages arrive without a count, so the fold counts them (the worker's path
      for producers that send no `tokens`): counter cost + fold cost;
    * `fold precounted`: `Message.tokens` is set at ingest with the configured counter's name, as
      the producer client does, so only the fold's own cost shows;

    each on 1 thread x N messages and on T threads x N/T messages (the same N messages, dealt
    to the threads turn by turn, round-robin, as one partition would see them interleaved), for
    both counters (`tiktoken` and `tokenx`); and

    * `fold precounted reflect`: 1 thread, the first messages only, with a low
      `reflection.observationTokens` so reflection cycles (and their retries) run often.

    Defaults: N = 2 000, T = 1 000, the product's thresholds (messageTokens 30 000,
    observationTokens 40 000; 4 000 on the reflect rows).  The 1-thread conversation reaches
    both thresholds; a thread of the 1 000-thread layout holds one ~1 000-token turn, far below
    messageTokens, so those rows fold messages and emit status without any cycle: they show the
    per-message cost across many memories, the 1-thread rows the cost of a long memory.

Why
    The fold is the whole engine and runs once per input on its partition's worker, so its
    single-core rate bounds a partition's throughput.  The two paths separate the cost of token
    counting (which a producer can take off the worker) from the cost of the fold itself, and
    the raw rows put both on the same scale in the same run (column `x raw`).

How the cycles run
    `observation.bufferTokens = false`, so observation is synchronous: a threshold emits an
    `observe` job and blocks the memory.  Every job is answered at once, in-process, with the
    scripted observer/reflector (`omstream.models.scripted`, no network) and the result is folded;
    that result fold is timed (it is fold work), producing the model's answer is not.  The
    number of committed observation and reflection cycles is reported per row.

Conversations are generated from a seed before any timing starts, so runs are comparable.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta

from omstream.engine.fold import EngineConfig, Folded, fold, new_state
from omstream.engine.rules.tokens import Counter, count_message, get_counter
from omstream.engine.state import MemoryState
from omstream.models.capabilities import takes_attachments
from omstream.models.scripted import observe, reflect
from omstream.schemas.config import load_om_config
from omstream.schemas.jobs import ModelJob, ModelResult
from omstream.schemas.keys import memory_key
from omstream.schemas.messages import Message, TokenCount

__all__ = ["Options", "Report", "Row", "format_table", "main", "run"]

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
COUNTERS = ("tiktoken", "tokenx")
MODEL_MS = 1500  # the scripted model's pretended call duration (event time, not wall time)
REFLECT_KINDS = ("reflect", "buffer-reflection")
#: CPU time of this process: "per core", and not inflated by other load on the machine.
CLOCK = time.process_time

# --- synthetic English-like text ----------------------------------------------------------------
_COMMON = (
    "the of and to in is that for it as with was on be by this are from at or an have not they "
    "which one you were all we her she there would their will when who him been has more if no "
    "out so said what up its about into than them can only other new some time could these two "
    "may then first any like now my such make over our even most me state after also made many "
    "before must through back years where much your way well down should because each just those "
    "people how too little world very still own see men work long get here between both life "
    "being under never day same another know while last might us great old year off come since "
    "against go came right used take three"
).split()
_CONTENT = (
    "deployment partition consumer producer latency throughput schedule invoice customer account "
    "meeting budget quarter report migration database cluster replica snapshot backup garden "
    "recipe kitchen weekend holiday flight hotel museum concert library neighbour bicycle "
    "mountain river weather morning evening afternoon yesterday tomorrow project deadline release "
    "feature regression benchmark configuration observation reflection memory thread message "
    "summary question answer decision preference allergy appointment prescription insurance "
    "mortgage apartment contract supplier warehouse shipment delivery refund subscription "
    "password notification dashboard spreadsheet presentation interview colleague manager "
    "daughter brother grandmother birthday anniversary wedding vacation marathon training"
).split()
_NAMES = (
    "Alice Bob Carmen Dmitri Elena Farah Gustavo Hiroshi Ingrid Jamal Kofi Lena Mateo Nadia "
    "Oskar Priya Quentin Rosa Sven Tamara Umar Valeria Wen Xavier Yusuf Zoe Berlin Lisbon "
    "Nairobi Osaka Toronto Kafka Postgres Monday Friday September"
).split()
_ENDINGS = (".", ".", ".", ".", "?", "!")


def _word(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.62:
        return rng.choice(_COMMON)
    if roll < 0.90:
        return rng.choice(_CONTENT)
    if roll < 0.97:
        return rng.choice(_NAMES)
    return str(rng.choice((rng.randint(2, 99), rng.randint(100, 9999), round(rng.uniform(0, 100), 1))))


def _sentence(rng: random.Random) -> str:
    words = [_word(rng) for _ in range(rng.randint(6, 24))]
    if len(words) > 9 and rng.random() < 0.5:
        cut = rng.randint(3, len(words) - 3)
        words[cut] += ","
    words[0] = words[0][:1].upper() + words[0][1:]
    return " ".join(words) + rng.choice(_ENDINGS)


def make_bodies(count: int, seed: int, target_tokens: int, counter: Counter) -> list[str]:
    """`count` distinct paragraphs of about `target_tokens` tokens each under `counter`."""
    rng = random.Random(seed)
    bodies = []
    for _ in range(count):
        sentences, tokens = [], 0
        while tokens < target_tokens:
            sentence = _sentence(rng)
            sentences.append(sentence)
            tokens += counter.count(" " + sentence)
        bodies.append(" ".join(sentences))
    return bodies


def conversation(bodies: Sequence[str], threads: int) -> list[Message]:
    """The bodies as turns (a user message, then the assistant's) dealt round-robin to `threads`.

    Message k has the same role and body in every layout, so one count per message serves all
    layouts; only the thread it belongs to (and its id and time) changes.
    """
    out = []
    for k, body in enumerate(bodies):
        turn, reply = divmod(k, 2)
        round_, thread = divmod(turn, threads)
        position = 2 * round_ + reply
        thread_id = f"t{thread:04d}"
        out.append(Message(
            id=f"{thread_id}-m{position}", thread_id=thread_id, resource_id=f"u{thread:04d}",
            role="assistant" if reply else "user", content=body,
            created_at=T0 + timedelta(seconds=30 * position),
        ))
    return out


# --- configuration and the scripted model -------------------------------------------------------
def engine_config(counter: str, message_tokens: int, observation_tokens: int) -> EngineConfig:
    """Synchronous observation (no buffering) with the scripted models."""
    return EngineConfig(load_om_config({
        "observation": {"model": "scripted/observer", "messageTokens": message_tokens,
                        "bufferTokens": False},
        "reflection": {"model": "scripted/reflector", "observationTokens": observation_tokens},
        "tokenCounter": counter,
    }), takes_attachments=takes_attachments)


def answer(job: ModelJob) -> ModelResult:
    """What the model agent would answer with the scripted models, without litellm or a broker."""
    system, user = job.messages[0].content, job.messages[1].content
    output = reflect(system, user) if job.kind in REFLECT_KINDS else observe(system, user)
    return ModelResult(
        kind=job.kind, cycle_id=job.cycle_id, memory_key=job.memory_key, thread_id=job.thread_id,
        request_hash=job.request_hash, ok=True, output=output, model=job.model,
        started_at=job.created_at, completed_at=job.created_at + timedelta(milliseconds=MODEL_MS),
    )


# --- measuring ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FoldRun:
    seconds: float
    jobs: int
    observe_cycles: int
    reflect_cycles: int


def count_all(messages: Sequence[Message], counter: Counter) -> tuple[list[int], float]:
    """`count_message` over every message: the counts, and the seconds spent counting."""
    start = CLOCK()
    counts = [count_message(message, counter) for message in messages]
    return counts, CLOCK() - start


def with_counts(messages: Sequence[Message], counts: Sequence[int], counter: str) -> list[Message]:
    """The messages as the producer client sends them: a count with the counter's name."""
    return [m.model_copy(update={"tokens": TokenCount(counter=counter, count=n)})
            for m, n in zip(messages, counts, strict=True)]


def _state_for(states: dict[str, MemoryState], config: EngineConfig, message: Message) -> MemoryState:
    key = memory_key(config.om, message.thread_id, message.resource_id)
    state = states.get(key)
    return state if state is not None else new_state(key, message.thread_id, message.resource_id)


def _check(out: Folded) -> None:
    if out.rejected:
        raise RuntimeError(f"the fold rejected a benchmark input: {out.rejected[0].reason}")


def fold_all(messages: Iterable[Message], config: EngineConfig) -> FoldRun:
    """Fold every message, answering each job at once; only the `fold` calls are timed."""
    clock = CLOCK
    states: dict[str, MemoryState] = {}
    elapsed = 0.0
    answered = 0
    for message in messages:
        state = _state_for(states, config, message)
        start = clock()
        out = fold(state, message, config)
        elapsed += clock() - start
        _check(out)
        pending = list(out.jobs)
        while pending:
            result = answer(pending.pop(0))
            answered += 1
            start = clock()
            out = fold(out.state, result, config)
            elapsed += clock() - start
            _check(out)
            pending.extend(out.jobs)
        states[out.state.memory_key] = out.state
    return FoldRun(
        seconds=elapsed, jobs=answered,
        observe_cycles=sum(s.cycles_completed for s in states.values()),
        reflect_cycles=sum(s.generation for s in states.values()),
    )


def _warm_up(config: EngineConfig, bodies: Sequence[str]) -> None:
    """One short thread through a cycle, so lazy imports and caches are not timed."""
    sample = conversation(list(bodies[:4]) * 3, threads=1)
    small = engine_config(config.om.token_counter, 1_000, 1_000)
    fold_all(sample, small)


# --- the report -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    scenario: str
    counter: str
    threads: int | None  # None: the raw counter rows, which fold nothing
    messages: int
    tokens: int
    seconds: float
    observe_cycles: int | None = None
    reflect_cycles: int | None = None
    jobs: int | None = None
    message_tokens: int | None = None
    observation_tokens: int | None = None
    vs_raw: float | None = None  # this row's tokens/s divided by the raw counter's tokens/s

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    def as_dict(self) -> dict:
        return {**asdict(self), "messages_per_s": self.messages_per_s,
                "tokens_per_s": self.tokens_per_s}


@dataclass(frozen=True)
class Options:
    messages: int = 2_000
    threads: int = 1_000
    message_tokens: int = 30_000
    observation_tokens: int = 40_000
    reflect_observation_tokens: int = 4_000
    reflect_messages: int = 600  # the reflect rows fold the first this many messages
    target_tokens: int = 500
    seed: int = 7
    counters: tuple[str, ...] = COUNTERS


@dataclass(frozen=True)
class Report:
    options: Options
    rows: list[Row]
    setup_seconds: float
    total_seconds: float
    tokenx_vs_tiktoken: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "benchmark": "fold",
            "python": platform.python_version(),
            "machine": platform.machine(),
            "options": {**asdict(self.options), "counters": list(self.options.counters)},
            "setup_seconds": self.setup_seconds,
            "total_seconds": self.total_seconds,
            "rows": [r.as_dict() for r in self.rows],
            "tokenx_vs_tiktoken": self.tokenx_vs_tiktoken,
        }


def _fold_rows(counter: str, options: Options, layouts: dict[int, list[Message]],
               counts: list[int]) -> list[Row]:
    config = engine_config(counter, options.message_tokens, options.observation_tokens)
    reflective = engine_config(counter, options.message_tokens, options.reflect_observation_tokens)
    precounted = {t: with_counts(messages, counts, config.counter.name)
                  for t, messages in layouts.items()}
    shape = {t: f"{t}x{options.messages // t}" for t in layouts}
    plan = [(f"fold ingest {shape[t]}", t, layouts[t], config) for t in layouts]
    plan += [(f"fold precounted {shape[t]}", t, precounted[t], config) for t in layouts]
    few = min(options.reflect_messages, options.messages)
    plan.append((f"fold precounted reflect 1x{few}", 1, precounted[1][:few], reflective))
    rows = []
    for scenario, threads, messages, cfg in plan:
        gc.collect()
        measured = fold_all(messages, cfg)
        rows.append(Row(
            scenario=scenario, counter=counter, threads=threads, messages=len(messages),
            tokens=sum(counts[:len(messages)]), seconds=measured.seconds, observe_cycles=measured.observe_cycles,
            reflect_cycles=measured.reflect_cycles, jobs=measured.jobs,
            message_tokens=cfg.resolved.observation.message_tokens,
            observation_tokens=cfg.resolved.reflection.observation_tokens,
        ))
    return rows


def _counter_rows(counter: str, options: Options, layouts: dict[int, list[Message]],
                  bodies: Sequence[str]) -> list[Row]:
    """The raw baseline (which also gives the counts a producer would send), then the folds."""
    _warm_up(engine_config(counter, options.message_tokens, options.observation_tokens), bodies)
    gc.collect()
    # Message k has the same role and body in every layout, so one count list serves them all.
    counts, seconds = count_all(layouts[1], get_counter(counter))
    raw = Row(scenario="raw count_message", counter=counter, threads=None,
              messages=len(counts), tokens=sum(counts), seconds=seconds)
    rows = [raw, *_fold_rows(counter, options, layouts, counts)]
    return [replace(r, vs_raw=r.tokens_per_s / raw.tokens_per_s) for r in rows]


def _ratios(rows: Sequence[Row]) -> dict[str, float]:
    """tokenx messages/s divided by tiktoken messages/s, per scenario (same messages)."""
    by = {(r.scenario, r.counter): r for r in rows}
    return {scenario: by[scenario, "tokenx"].messages_per_s / by[scenario, "tiktoken"].messages_per_s
            for scenario, counter in by if counter == "tiktoken" and (scenario, "tokenx") in by}


def run(options: Options) -> Report:
    """Generate the conversations, then measure every scenario for every counter."""
    begin = time.perf_counter()
    bodies = make_bodies(options.messages, options.seed, options.target_tokens - 5,
                         get_counter("tiktoken"))
    layouts = {t: conversation(bodies, t) for t in dict.fromkeys((1, options.threads))}
    setup = time.perf_counter() - begin
    rows = [row for counter in options.counters
            for row in _counter_rows(counter, options, layouts, bodies)]
    return Report(options=options, rows=rows, setup_seconds=setup,
                  total_seconds=time.perf_counter() - begin, tokenx_vs_tiktoken=_ratios(rows))


# --- output ---------------------------------------------------------------------------------------
def _cycles(row: Row) -> str:
    return "-" if row.observe_cycles is None else f"{row.observe_cycles}/{row.reflect_cycles}"


def format_table(report: Report) -> str:
    """The rows as a fixed-width table, then the tokenx/tiktoken ratios."""
    o = report.options
    head = ("scenario", "counter", "messages", "tokens", "seconds", "messages/s", "tokens/s",
            "obs/refl", "x raw")
    lines = [
        f"fold benchmark: {o.messages} messages of ~{o.target_tokens} tokens (tiktoken), one core; "
        f"messageTokens={o.message_tokens}, observationTokens={o.observation_tokens} "
        f"(reflect rows: {o.reflect_observation_tokens}), seed={o.seed}",
        "",
    ]
    table = [head] + [(
        r.scenario, r.counter, f"{r.messages:,}", f"{r.tokens:,}", f"{r.seconds:.3f}",
        f"{r.messages_per_s:,.0f}", f"{r.tokens_per_s:,.0f}", _cycles(r), f"{r.vs_raw:.2f}",
    ) for r in report.rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for index, row in enumerate(table):
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    if report.tokenx_vs_tiktoken:
        lines += ["", "tokenx / tiktoken (messages/s, same messages, same run):"]
        width = max(len(s) for s in report.tokenx_vs_tiktoken)
        lines += [f"  {s.ljust(width)}  {v:.2f}x" for s, v in report.tokenx_vs_tiktoken.items()]
    lines += ["", f"setup (generation) {report.setup_seconds:.1f} s, "
                  f"total wall time {report.total_seconds:.1f} s"]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fold_bench",
        description="Time the fold alone (one core) on ~500-token messages: 1 thread and many "
                    "threads, tokens counted by the fold or at ingest, tiktoken and tokenx.")
    parser.add_argument("--messages", type=int, help="messages per layout, in user/assistant "
                        "turns (default 2000; --quick: 200)")
    parser.add_argument("--threads", type=int, help="threads of the many-thread layout; each "
                        "gets the same number of turns (default 1000; --quick: 100)")
    parser.add_argument("--message-tokens", type=int, default=Options.message_tokens,
                        help="observation.messageTokens (default %(default)s)")
    parser.add_argument("--observation-tokens", type=int, default=Options.observation_tokens,
                        help="reflection.observationTokens (default %(default)s)")
    parser.add_argument("--reflect-observation-tokens", type=int,
                        default=Options.reflect_observation_tokens,
                        help="reflection.observationTokens of the reflect rows "
                             "(default %(default)s)")
    parser.add_argument("--reflect-messages", type=int, default=Options.reflect_messages,
                        help="messages the reflect rows fold, from the 1-thread conversation "
                             "(default %(default)s)")
    parser.add_argument("--target-tokens", type=int, default=Options.target_tokens,
                        help="tokens per message under tiktoken (default %(default)s)")
    parser.add_argument("--seed", type=int, default=Options.seed)
    parser.add_argument("--counter", action="append", choices=COUNTERS, dest="counters",
                        help="measure only this counter (repeatable; default both)")
    parser.add_argument("--quick", action="store_true", help="a small run (a few seconds)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    return parser


def options_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Options:
    messages = args.messages or (200 if args.quick else Options.messages)
    threads = args.threads or (100 if args.quick else Options.threads)
    if threads < 1 or messages % (2 * threads):
        parser.error(f"--messages ({messages}) must be a multiple of 2 x --threads ({threads}): "
                     "every thread gets the same number of user/assistant turns")
    return Options(
        messages=messages, threads=threads, message_tokens=args.message_tokens,
        observation_tokens=args.observation_tokens,
        reflect_observation_tokens=args.reflect_observation_tokens,
        reflect_messages=args.reflect_messages,
        target_tokens=args.target_tokens, seed=args.seed,
        counters=tuple(dict.fromkeys(args.counters or COUNTERS)),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    report = run(options_from(args, parser))
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(format_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
