"""Memory quality on LoCoMo: does the agent answer from omstream's context window as well as
from the conversation itself?

    python -m bench.quality                                  # conversation 0, 40 questions, local model
    python -m bench.quality --max-sessions 3 --questions 8   # a quick development run
    python -m bench.quality --conversations 0-4              # the development set, one table over it
    python -m bench.quality --model gemini/gemini-2.5-flash  # any litellm model, key in the environment
    python -m bench.quality --reader gemini/gemini-2.5-flash # local Observer/Reflector, hosted reader
    python -m bench.quality --help

Run it from the repository root.  The data set is read from `--data` (default
`../shared/data/locomo/locomo10.json` next to the repository); nothing of it is copied here
(its licence is CC BY-NC).  Loading, prompts and scoring are in `bench/locomo.py`.

**Published figures use a whole conversation** (no `--max-sessions`): `--max-sessions S` ingests
only the first S sessions and asks only questions whose evidence lies in them, which is for
development only.  Conversations 5-9 are held out: develop on 0-4.

What runs
1. **Ingest.** One LoCoMo conversation, session by session, through omstream's real fold,
   prompts, parsers and model calls, without a broker: the loop of `omstream.conversations.simulation.simulate`
   (what `om simulate` runs; `bench/quality_ingest.py`, with checkpointed model calls) over chat
   messages made from the turns.  A session's date is the time
   of its first message; the next ones follow a minute apart.  A shared photo becomes
   `[shares a photo: <blip caption>]` after the text.
   *Both speakers are `user`, the speaker's name prefixed* (`"Caroline: I went to ..."`): LoCoMo
   is a chat between two people and asks about both equally, whereas omstream's Observer is
   told to record what the *user* asserts (🔴) and to treat assistant text as the agent's own
   output; mapping one speaker to `assistant` would make the memory lopsided by design, not by
   quality.  By default the Observer and Reflector also get a one-sentence
   `observation.instruction` naming the two speakers (`--no-speaker-instruction` leaves it out),
   the product's own option for telling the Observer what it is watching.
   Observation is synchronous (`bufferTokens = false`): each time the unobserved messages pass
   `messageTokens` the Observer runs over them (fewest calls for a slow local model; the
   memory's content does not depend on buffering).  Thresholds scale with the conversation:
   `messageTokens` = two mean sessions (at least 500), `observationTokens` = 8 % of the
   conversation's tokens (at least 500), so that the Reflector runs once or twice; both are
   printed and can be set (`--message-tokens`, `--observation-tokens`).
2. **Answer.** A stratified sample of `--questions` questions (proportional to the categories,
   at least 3 each, seeded), each asked of the reader (`--reader`, else `--model`) in four conditions:
   `omstream` the agent's context window after ingestion (`projections.views.context`, rebuilt from
   the fold's events as the read side does: observations plus the messages not yet observed);
   `recent` the most recent turns cut to the same token budget; `full` the whole
   conversation; `none` no context; and, opt-in (`--conditions ...,omstream+recall`), the window
   plus up to `--recall-calls` calls of the real `recall` handler per question
   (`bench/quality_recall.py`: a text protocol, mode messages; search needs an ingest with
   retrieval on).  `recent` and `full` are LoCoMo's own transcript format
   (`DATE: ...` / `CONVERSATION:` / `X said, "..."`).  The shared context comes first and the
   question last, and a condition's questions run back to back, so a llama.cpp server reuses
   the context from its prompt cache.  Replies: at most 32 tokens, temperature 0, LoCoMo's
   prompts (`bench.locomo`).
3. **Score** with LoCoMo's token F1 and per-category rules (`bench.locomo.score`); no model
   judges.

Resuming.  Every phase is checkpointed under `.omstream/bench/quality/conv<N>/`
(`--checkpoints`; `bench/quality_store.py` says what each file is keyed by): the ingest's model
calls as they return and the finished ingest, each condition's answers question by question.
A run stopped anywhere (Ctrl-C, a kill, `--stop-after-calls`) and started again with the same
arguments redoes no finished phase and asks no answered question again; a changed input (the
conversation, the configuration, a model, the engine's code, the prompts) makes new keys.
Condition `full` depends only on the conversation, the reader and the questions, so it is
computed once and every later run reuses it (the report says so).  Delete the directory to
start from nothing.

Report: F1 per condition per category and overall, context tokens per condition, compression
(conversation tokens / omstream window tokens, and / observation tokens), Observer and
Reflector calls, the share of Observer outputs parsed clean / recovered / failed and whether the
Observer ran under the answer's grammar (`observerGrammar`: a local model does), wall time per
phase; printed as a table and written to `--out` (default
`.omstream/bench/quality-conv<N>.json`).  Also: each model's prompt and generation speed,
measured at the start on fixed prompts (`quality_answer.measure_speed`); F1 on the questions
whose evidence lies inside / outside the `recent` window; the per-question inspection file
`<out>.questions.jsonl` (per condition the context's tokens, the reply, the F1; the gold answer;
where the evidence landed in omstream's memory, `bench/quality_inspect.py`); and the 10 worst
regressions of omstream against `recent`, printed at the end.

Tokens are counted with the project's counter (`tiktoken`, o200k_base, with its per-message
overhead of 3.8), not the reader's tokenizer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import locomo
from .quality_answer import (
    answer_condition,
    chat_tokens,
    format_speed,
    measure_speed,
    model_identity,
    question_options,
    recent_within,
    render_transcript,
    transcript_chat,
)
from .quality_ingest import (
    COUNTER,
    Ingested,
    engine_sources,
    ingest,
    messages_of,
    om_config,
    session_tokens,
    thread_id,
    thresholds,
)
from .quality_inspect import worst_regressions
from .quality_recall import CONDITION as RECALL_CONDITION
from .quality_recall import DEFAULT_CALLS as DEFAULT_RECALL_CALLS
from .quality_recall import Recaller, answer_with_recall, guide_message, recall_summary
from .quality_report import (
    format_regressions,
    format_split,
    format_table,
    observer_grammar,
    question_rows,
    split_summary,
    summarise,
    write_questions,
)
from .quality_store import BENCH_VERSION, CallCache, CallLimit, StopRequested, Store, digest, source_digest
from .quality_summary import combine, format_summary, parse_conversations

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEFAULT_CHECKPOINTS = ROOT / ".omstream" / "bench" / "quality"
DEFAULT_MODEL = "local/qwen2.5-1.5b"
CONDITIONS = ("omstream", "recent", "full", "none")
#: Asked only when named in `--conditions` (`quality_recall`: opt-in, it adds reader calls).
OPTIONAL_CONDITIONS = (RECALL_CONDITION,)
SPEAKER_INSTRUCTION = (
    "The messages are a conversation between two people, {a} and {b}, both users; each message "
    "starts with its speaker's name. Record what each of them says about themselves, each other "
    "and their lives, and always name the person (\"{a} stated ...\"), never just \"User\".")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.quality", description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo's locomo10.json (default: %(default)s)")
    p.add_argument("--conversation", type=int, default=0, help="sample index in the file (default 0; 5-9 are held out)")
    p.add_argument("--conversations", default=None, metavar="LIST",
                   help="run several conversations one after the other (`0-4`: the development set, whole) "
                        "and print one table over them (bench/quality_summary.py); each keeps its own "
                        "checkpoints and report, --out is then the summary's JSON")
    p.add_argument("--questions", type=int, default=40, help="questions to sample (default 40)")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="every role's model: `local/qwen2.5-1.5b` (default) or any litellm model "
                        "(its key from the environment, e.g. GEMINI_API_KEY)")
    p.add_argument("--observer", default=None, help="the Observer's model (default: --model)")
    p.add_argument("--reflector", default=None, help="the Reflector's model (default: --observer, else --model)")
    p.add_argument("--reader", default=None, help="the model that answers the questions (default: --model)")
    p.add_argument("--out", type=Path, default=None, help="JSON report (default .omstream/bench/quality-conv<N>.json)")
    p.add_argument("--checkpoints", type=Path, default=DEFAULT_CHECKPOINTS,
                   help="where phases are checkpointed (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="question sample and option order (default 0)")
    p.add_argument("--max-sessions", type=int, default=None,
                   help="ingest only the first S sessions and ask only about them (development; "
                        "published figures use the whole conversation)")
    p.add_argument("--message-tokens", type=int, default=None, help="observation.messageTokens (default: scaled)")
    p.add_argument("--observation-tokens", type=int, default=None,
                   help="reflection.observationTokens (default: scaled)")
    p.add_argument("--conditions", default=",".join(CONDITIONS),
                   help=f"which to answer, comma-separated (default {','.join(CONDITIONS)}; also "
                        f"{', '.join(OPTIONAL_CONDITIONS)}: the window plus recall calls, bench/quality_recall.py)")
    p.add_argument("--recall-calls", type=int, default=DEFAULT_RECALL_CALLS,
                   help="condition omstream+recall: recall calls per question at most (default %(default)s)")
    p.add_argument("--export-corpus", type=Path, default=None, metavar="DIR",
                   help="write the Observer/Reflector answers of this run's call checkpoint as parser-corpus "
                        "fixtures into DIR (tests/fixtures/local_model/) and stop: no model call "
                        "(bench/quality_corpus.py); give the run's own arguments")
    p.add_argument("--corpus-label", default="lq", help="--export-corpus: the fixtures' prompt_version label")
    p.add_argument("--corpus-keep-text", action="store_true",
                   help="--export-corpus: keep LoCoMo's messages in the prompts (CC BY-NC: not for the repository)")
    p.add_argument("--call-timeout", type=float, default=1800.0,
                   help="seconds per observer/reflector call before it is retried (default 1800; "
                        "run_job's own 600 s is too short for the local model on a busy 2-core machine)")
    p.add_argument("--no-speaker-instruction", action="store_true",
                   help="no observation/reflection instruction naming the two speakers")
    p.add_argument("--no-speed", action="store_true", help="skip the speed measurement at the start")
    p.add_argument("--stop-after-calls", type=int, default=None,
                   help="stop the run after N model calls (to try resuming; the next run continues)")
    return p.parse_args(argv)


def roles(args: argparse.Namespace) -> dict[str, str]:
    """Each role's model: its own flag, else `--model` (the Reflector follows the Observer)."""
    observer = args.observer or args.model
    return {"observer": observer, "reflector": args.reflector or observer, "reader": args.reader or args.model}


def check_keys(models: dict[str, str]) -> None:
    """Stop before any work when a hosted model's key is not in the environment."""
    from omstream.models import local
    from omstream.models.calls import litellm_model_name, warm_up

    warm_up()  # litellm, imported with the project's offline settings
    import litellm

    for role, model in models.items():
        if model.startswith("scripted/") or local.is_local(model):
            continue
        try:
            missing = litellm.validate_environment(model=litellm_model_name(model)).get("missing_keys") or []
        except Exception:  # noqa: BLE001 - an unknown provider is reported by its first call
            missing = []
        if missing:
            raise SystemExit(f"--{role} {model}: its key is not in the environment (litellm misses "
                             f"{', '.join(missing)})")


async def speeds(models: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for model in dict.fromkeys(models.values()):
        try:
            speed = await measure_speed(model)
        except Exception as exc:  # noqa: BLE001 - the first call of a run: say why before anything is spent
            raise SystemExit(f"{model}: the speed check's call failed ({type(exc).__name__}: {exc}); "
                             "a hosted model needs its key in the environment (e.g. GEMINI_API_KEY)") from exc
        print("speed " + format_speed(speed), flush=True)
        out.append(speed)
    return out


def call_cache(store: Store, om: Any) -> CallCache:
    runtime = digest(model_identity(om.observation.model), model_identity(om.reflection.model))
    return CallCache(store.root / f"calls-{runtime}.jsonl")


async def ingest_phase(store: Store, thread: str, om: Any, messages: list[Any], limit: CallLimit,
                       timeout: float, events: list[Any] | None = None) -> tuple[Ingested, dict[str, Any]]:
    """The ingest, from its checkpoint when one has the same key.  `events` (for the recall
    condition) receives the fold's events: from a checkpointed ingest the conversation is folded
    again (pure, seconds), its model calls served from the call checkpoint."""
    key = digest([m.model_dump(mode="json") for m in messages], om.model_dump(mode="json"),
                 source_digest(engine_sources()), BENCH_VERSION)
    saved = store.load("ingest", key)
    if saved is not None:
        print(f"ingest: from checkpoint {store.path('ingest', key)} (no model call)")
        if events is not None:
            cache = call_cache(store, om)
            await ingest(thread, om, messages, cache, limit, timeout=timeout, events=events)
            print(f"ingest: folded again for recall's read side ({cache.hits} calls from the call checkpoint)")
        return Ingested.from_json(saved["ingested"]), {"key": key, "checkpoint": True, "callsFromCheckpoint": None}
    cache = call_cache(store, om)
    ingested = await ingest(thread, om, messages, cache, limit, timeout=timeout, events=events)
    store.save("ingest", key, {"ingested": ingested.to_json()})
    return ingested, {"key": key, "checkpoint": False, "callsFromCheckpoint": cache.hits}


def contexts_of(conditions: Sequence[str], conversation: locomo.Conversation, ingested: Ingested,
                counter: Any, thread: str = "", recall_calls: int = DEFAULT_RECALL_CALLS,
                ) -> tuple[dict[str, list[dict[str, Any]]], int | None]:
    """Each condition's chat, and how many turns `recent` holds (None when not run)."""
    contexts: dict[str, list[dict[str, Any]]] = {}
    budget = chat_tokens(ingested.chat, counter)
    recent_turns = None
    for name in conditions:
        if name == "omstream":
            contexts[name] = ingested.chat
        elif name == RECALL_CONDITION:
            contexts[name] = [*ingested.chat, guide_message(conversation, thread, recall_calls)]
        elif name == "recent":
            contexts[name], recent_turns = recent_within(conversation, budget, counter)
        elif name == "full":
            contexts[name] = transcript_chat(render_transcript(conversation, conversation.turns()))
        else:
            contexts[name] = []
    return contexts, recent_turns


def parse_conditions(text: str) -> list[str]:
    conditions = [c.strip() for c in text.split(",") if c.strip()]
    unknown = set(conditions) - set(CONDITIONS) - set(OPTIONAL_CONDITIONS)
    if unknown:
        raise SystemExit(f"unknown condition(s) {sorted(unknown)}; choose from "
                         f"{', '.join((*CONDITIONS, *OPTIONAL_CONDITIONS))}")
    return conditions


async def run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from omstream.engine.rules.tokens import get_counter

    timings: dict[str, float] = {}
    t0 = time.monotonic()
    if not args.data.exists():
        raise SystemExit(f"--data {args.data}: no such file (LoCoMo's locomo10.json, from snap-research/locomo)")
    conversations = locomo.load(args.data)
    if not 0 <= args.conversation < len(conversations):
        raise SystemExit(f"--conversation {args.conversation}: the file has {len(conversations)}")
    if args.conversation >= 5:
        print("note: conversations 5-9 are held out; report them, do not tune on them", file=sys.stderr)
    full_conversation = conversations[args.conversation]
    conversation = locomo.truncated(full_conversation, args.max_sessions)
    conditions = parse_conditions(args.conditions)
    models = roles(args)
    counter = get_counter(COUNTER)
    thread = thread_id(conversation, args.conversation)
    messages = messages_of(conversation, thread)
    per_session = session_tokens(conversation, messages, counter)
    scaled = thresholds(per_session)
    message_tokens = args.message_tokens or scaled[0]
    observation_tokens = args.observation_tokens or scaled[1]
    instruction = None if args.no_speaker_instruction else SPEAKER_INSTRUCTION.format(
        a=conversation.speaker_a, b=conversation.speaker_b)
    om = om_config(models["observer"], models["reflector"], message_tokens, observation_tokens, instruction)
    questions = locomo.stratified_sample(conversation.qa, args.questions, args.seed)
    counts = dict(sorted(Counter(q.category for q in questions).items()))
    available = dict(sorted(Counter(q.category for q in conversation.qa).items()))
    store = Store(args.checkpoints / f"conv{args.conversation}")
    limit = CallLimit(args.stop_after_calls)
    timings["load"] = time.monotonic() - t0

    scope = (f"{len(conversation.sessions)} of {len(full_conversation.sessions)} sessions"
             if args.max_sessions else f"all {len(conversation.sessions)} sessions")
    print(f"conversation {args.conversation} ({conversation.sample_id}): {scope}, {len(messages)} messages, "
          f"{sum(per_session)} tokens ({COUNTER}); models " + ", ".join(f"{k} {v}" for k, v in models.items()))
    print(f"thresholds: observation.messageTokens={message_tokens} reflection.observationTokens="
          f"{observation_tokens} (bufferTokens=false; scaled: {scaled[0]}/{scaled[1]})")
    print("questions sampled per category: " + ", ".join(
        f"{c} {locomo.CATEGORY_NAMES[c]} {counts[c]}/{available[c]}" for c in counts)
        + f" (seed {args.seed}); checkpoints in {store.root}")
    if args.export_corpus is not None:
        from .quality_corpus import export_corpus

        written = await export_corpus(args.export_corpus, store, call_cache(store, om), thread, om, messages,
                                      label=args.corpus_label, conversation=args.conversation,
                                      keep_text=args.corpus_keep_text)
        return {"exported": [str(p) for p in written]}
    if not questions:
        raise SystemExit("no questions to ask (with --max-sessions, none has all its evidence in those sessions)")
    if args.recall_calls < 1:
        raise SystemExit("--recall-calls must be at least 1")
    check_keys(models)
    speed = [] if args.no_speed else await speeds(models)

    t = time.monotonic()
    events: list[Any] | None = [] if RECALL_CONDITION in conditions else None
    ingested, ingest_info = await ingest_phase(store, thread, om, messages, limit, args.call_timeout, events)
    timings["ingest"] = time.monotonic() - t
    served = "" if ingest_info["checkpoint"] else f" ({ingest_info['callsFromCheckpoint']} served from the call checkpoint)"
    print(f"ingest: {ingested.observer_calls} observer and {ingested.reflector_calls} reflector calls{served}, "
          f"observer outputs {ingested.outcomes}, {ingested.observation_tokens} observation tokens, "
          f"{ingested.raw_messages} messages still raw, {timings['ingest']:.0f} s")

    contexts, recent_turns = contexts_of(conditions, conversation, ingested, counter, thread, args.recall_calls)
    context_tokens = {name: chat_tokens(chat, counter) for name, chat in contexts.items()}
    omstream_tokens = chat_tokens(ingested.chat, counter)
    conversation_tokens = sum(per_session)

    options = question_options(questions, args.seed)
    answers: dict[str, list[dict[str, Any]]] = {}
    reused: dict[str, int] = {}
    recall_figures = None
    for name in conditions:
        t = time.monotonic()
        if name == RECALL_CONDITION:
            assert events is not None
            answers[name], reused[name] = await answer_with_recall(
                contexts[name], questions, options, models["reader"], args.seed, store, limit,
                Recaller.of_events(events, thread, om), args.recall_calls,
                digest([m.model_dump(mode="json") for m in messages]), args.call_timeout)
            recall_figures = recall_summary(answers[name], args.recall_calls)
        else:
            answers[name], reused[name] = await answer_condition(
                name, contexts[name], questions, options, models["reader"], args.seed, store, limit,
                args.call_timeout)
        timings[f"answer {name}"] = time.monotonic() - t
        if reused[name]:
            print(f"answer {name}: {reused[name]} of {len(questions)} answers from the checkpoint"
                  + (" (the whole conversation's answers depend only on it, the reader and the questions: "
                     "computed once, reused)" if name == "full" else ""))
    timings["total"] = time.monotonic() - t0
    summary = summarise(questions, answers)
    rows = question_rows(conversation, thread, questions, options, answers, contexts, context_tokens,
                         ingested.observations, ingested.raw_ids, recent_turns)
    split = split_summary(rows)
    worst = worst_regressions(rows)
    questions_path = out.with_suffix(".questions.jsonl")
    write_questions(questions_path, rows)

    outcome_total = sum(ingested.outcomes.values())
    report = {
        "benchmark": "bench.quality (LoCoMo)",
        "data": str(args.data),
        "conversation": args.conversation,
        "sampleId": conversation.sample_id,
        "sessions": len(conversation.sessions),
        "sessionsInConversation": len(full_conversation.sessions),
        "fullConversation": not args.max_sessions or args.max_sessions >= len(full_conversation.sessions),
        "messages": len(messages),
        "models": models,
        "speed": speed,
        "seed": args.seed,
        "config": {"messageTokens": message_tokens, "observationTokens": observation_tokens,
                   "bufferTokens": False, "tokenCounter": COUNTER, "speakerInstruction": instruction,
                   "roles": "both speakers user, name prefixed"},
        "questionsPerCategory": {str(c): n for c, n in counts.items()},
        "questionsAvailablePerCategory": {str(c): n for c, n in available.items()},
        "f1": summary,
        "f1ByRecentWindow": split,
        "contextTokens": context_tokens,
        "conversationTokens": conversation_tokens,
        "observationTokens": ingested.observation_tokens,
        "compression": {
            "conversationPerOmstreamWindow": round(conversation_tokens / omstream_tokens, 3) if omstream_tokens else None,
            "conversationPerObservations": round(conversation_tokens / ingested.observation_tokens, 3)
            if ingested.observation_tokens else None},
        "recentTurns": recent_turns,
        "recall": recall_figures,
        "observerCalls": ingested.observer_calls,
        "reflectorCalls": ingested.reflector_calls,
        "generation": ingested.generation,
        "observerGrammar": observer_grammar(ingested.calls),
        "observerOutputs": ingested.outcomes,
        "observerOutputShares": {k: round(v / outcome_total, 3) for k, v in ingested.outcomes.items()}
        if outcome_total else {},
        "rawMessagesInWindow": ingested.raw_messages,
        "events": ingested.events,
        "rejected": ingested.rejected,
        "checkpoints": {"directory": str(store.root), "ingest": ingest_info, "answersFromCheckpoint": reused},
        "modelCallsMade": limit.made,
        "modelCalls": ingested.calls,
        "seconds": {k: round(v, 1) for k, v in timings.items()},
        "observations": ingested.observations,
        "questionsFile": str(questions_path),
        "worstRegressions": [r["index"] for r in worst],
    }
    print_report(report, summary, counts, split, worst, omstream_tokens)
    return report


def print_report(report: dict[str, Any], summary: dict[str, dict[str, Any]], counts: dict[int, int],
                 split: dict[str, dict[str, Any]], worst: list[dict[str, Any]], omstream_tokens: int) -> None:
    print()
    print(format_table(summary, counts, report["contextTokens"]))
    print()
    print(format_split(split))
    print()
    compression = report["compression"]
    print(f"conversation {report['conversationTokens']} tokens; omstream window {omstream_tokens} "
          f"(x{compression['conversationPerOmstreamWindow']}), observations {report['observationTokens']} "
          f"(x{compression['conversationPerObservations']}); recent = last {report['recentTurns']} turns")
    grammar = {True: "under the grammar", False: "without a grammar"}.get(report.get("observerGrammar"), "grammar ?")
    print(f"observer calls {report['observerCalls']}, {grammar} (outputs: " + ", ".join(
        f"{k} {v} ({report['observerOutputShares'].get(k, 0):.0%})" for k, v in report["observerOutputs"].items())
        + f"), reflector calls {report['reflectorCalls']}")
    if report.get("recall"):
        r = report["recall"]
        print(f"recall (omstream+recall, at most {r['cap']} per question): {r['calls']} calls, "
              f"{r['questionsUsingRecall']} of {r['questions']} questions used it, {r['refused']} refused by the "
              f"handler, cap reached {r['capReached']}, a recall asked past the cap {r['recallPastCap']} "
              f"(of which no answer {r['noAnswerPastCap']})")
    print("model calls made by this run: " + (", ".join(f"{k} {v}" for k, v in report["modelCallsMade"].items())
                                               or "none (all from checkpoints)"))
    print("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in report["seconds"].items()))
    print()
    print(f"worst regressions of omstream against recent ({len(worst)}):")
    print(format_regressions(worst))
    print(f"per-question inspection: {report['questionsFile']}")


def _write(out: Path, report: dict[str, Any], command: str) -> None:
    report["command"] = command
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"report: {out}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join(["python -m bench.quality", *(sys.argv[1:] if argv is None else argv)])
    if args.conversations is not None:
        return _main_several(args, command)
    out = args.out or ROOT / ".omstream" / "bench" / f"quality-conv{args.conversation}.json"
    try:
        report = asyncio.run(run(args, out))
    except StopRequested as stop:
        print(f"stopped: {stop}", file=sys.stderr)
        return 3
    if "exported" not in report:  # --export-corpus: no run, no report
        _write(out, report, command)
    return 0


def _main_several(args: argparse.Namespace, command: str) -> int:
    """`--conversations`: each conversation's run and report as `--conversation N` makes them,
    then the table over all of them."""
    try:
        indices = parse_conversations(args.conversations)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    if args.export_corpus is not None:
        raise SystemExit("--export-corpus takes one --conversation")
    summary_out = args.out or ROOT / ".omstream" / "bench" / "quality-summary.json"
    reports = []
    for n in indices:
        one = argparse.Namespace(**{**vars(args), "conversation": n, "conversations": None, "out": None})
        out = summary_out.parent / f"quality-conv{n}.json"  # beside the summary
        print(f"=== conversation {n} ({indices.index(n) + 1} of {len(indices)})", flush=True)
        try:
            report = asyncio.run(run(one, out))
        except StopRequested as stop:
            print(f"stopped: {stop} (conversation {n}; the next run resumes there)", file=sys.stderr)
            return 3
        _write(out, report, f"{command} (conversation {n})")
        reports.append(report)
    summary = combine(reports)
    print()
    print(format_summary(summary))
    _write(summary_out, summary, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
