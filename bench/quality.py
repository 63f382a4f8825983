"""Memory quality on LoCoMo: does the agent answer from omstream's context window as well as
from the conversation itself?

    python -m bench.quality                                  # conversation 0, 40 questions, local model
    python -m bench.quality --max-sessions 3 --questions 8   # a quick development run
    python -m bench.quality --model gemini/gemini-2.5-flash  # any litellm model, key in the environment
    python -m bench.quality --help

Run it from the repository root.  The data set is read from `--data` (default
`../shared/data/locomo/locomo10.json` next to the repository); nothing of it is copied here
(its licence is CC BY-NC).  Loading, prompts and scoring are in `bench/locomo.py`.

**Published figures use a whole conversation** (no `--max-sessions`): `--max-sessions S` ingests
only the first S sessions and asks only questions whose evidence lies in them, which is for
development only.  Conversations 5-9 are held out: develop on 0-4.

What runs
1. **Ingest.** One LoCoMo conversation, session by session, through omstream's real fold,
   prompts, parsers and model calls, without a broker: `omstream.simulation.simulate` (what
   `om simulate` runs) over chat messages made from the turns.  A session's date is the time
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
   at least 3 each, seeded), each asked with the same model as reader in four conditions:
   `omstream` the agent's context window after ingestion (`projections.context`, rebuilt from
   the fold's events as the read side does: observations plus the messages not yet observed);
   `recent` the most recent turns cut to the same token budget; `full` the whole
   conversation; `none` no context.  `recent` and `full` are LoCoMo's own transcript format
   (`DATE: ...` / `CONVERSATION:` / `X said, "..."`).  The shared context comes first and the
   question last, and a condition's questions run back to back, so a llama.cpp server reuses
   the context from its prompt cache.  Replies: at most 32 tokens, temperature 0, LoCoMo's
   prompts (`bench.locomo`).
3. **Score** with LoCoMo's token F1 and per-category rules (`bench.locomo.score`); no model
   judges.

Report: F1 per condition per category and overall, context tokens per condition, compression
(conversation tokens / omstream window tokens, and / observation tokens), Observer and
Reflector calls, the share of Observer outputs parsed clean / recovered / failed, wall time per
phase; printed as a table and written to `--out` (default
`.omstream/bench/quality-conv<N>.json`).

Tokens are counted with the project's counter (`tiktoken`, o200k_base, with its per-message
overhead of 3.8), not the reader's tokenizer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tqdm import tqdm

from . import locomo
from .locomo import QA, Conversation, Session, Turn

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEFAULT_MODEL = "local/qwen2.5-1.5b"
CONDITIONS = ("omstream", "recent", "full", "none")
COUNTER = "tiktoken"
TOKENS_PER_MESSAGE = 3.8
MESSAGE_GAP = timedelta(minutes=1)
MAX_ANSWER_TOKENS = 32
#: LoCoMo's opening of a transcript (CONV_START_PROMPT, its typo fixed).
CONV_START = ("Below is a conversation between two people: {} and {}. The conversation takes place over "
              "multiple days and the date of each conversation is written at the beginning of the "
              "conversation.\n\n")
SPEAKER_INSTRUCTION = (
    "The messages are a conversation between two people, {a} and {b}, both users; each message "
    "starts with its speaker's name. Record what each of them says about themselves, each other "
    "and their lives, and always name the person (\"{a} stated ...\"), never just \"User\".")


# --- ingestion ---------------------------------------------------------------------------------------
def thread_id(conversation: Conversation, index: int) -> str:
    return f"locomo-{conversation.sample_id or index}"


def messages_of(conversation: Conversation, thread: str) -> list[Any]:
    """The conversation as chat messages: every turn a `user` message `"<speaker>: <text>"`,
    a session's first at the session's date, the next ones `MESSAGE_GAP` apart (always after
    the previous message)."""
    from omstream.schemas.messages import Message

    messages: list[Message] = []
    last: datetime | None = None
    for session in conversation.sessions:
        for i, turn in enumerate(session.turns):
            at = session.at + i * MESSAGE_GAP
            if last is not None and at <= last:
                at = last + timedelta(seconds=1)
            last = at
            messages.append(Message(id=f"{thread}:{session.number}:{i + 1}", thread_id=thread, role="user",
                                    content=f"{turn.speaker}: {turn.content()}", created_at=at))
    return messages


def session_tokens(conversation: Conversation, messages: Sequence[Any], counter: Any) -> list[int]:
    """Tokens per session as the fold counts them (the project's counter and overheads)."""
    from omstream.engine.tokens import count_message

    counts = [count_message(m, counter) for m in messages]
    out, start = [], 0
    for session in conversation.sessions:
        out.append(sum(counts[start:start + len(session.turns)]))
        start += len(session.turns)
    return out


def thresholds(per_session: Sequence[int]) -> tuple[int, int]:
    """(messageTokens, observationTokens) scaled to a conversation: two mean sessions, and
    8 % of the whole, each rounded up to 100 and at least 500.  The local model wrote about
    7.5 observation tokens per 100 message tokens on conversation 0's first sessions, so the
    log reaches 8 % of the conversation late in it: one reflection, two if the Observer is
    wordier."""
    total = sum(per_session)
    mean = total / max(1, len(per_session))
    message_tokens = max(500, math.ceil(2 * mean / 100) * 100)
    observation_tokens = max(500, math.ceil(0.08 * total / 100) * 100)
    return message_tokens, observation_tokens


def om_config(model: str, message_tokens: int, observation_tokens: int, instruction: str | None) -> Any:
    from omstream.schemas.config import load_om_config

    observation: dict[str, Any] = {"model": model, "messageTokens": message_tokens, "bufferTokens": False}
    reflection: dict[str, Any] = {"model": model, "observationTokens": observation_tokens}
    if instruction:
        observation["instruction"] = reflection["instruction"] = instruction
    return load_om_config({"tokenCounter": COUNTER, "timeZone": "UTC",
                           "observation": observation, "reflection": reflection})


def observer_outcome(result: Any) -> str:
    """`clean`, `recovered` or `failed` for one Observer result (`parsing.parse_outcome`)."""
    from omstream.engine.parsing import parse_outcome

    return parse_outcome(result.output) if result.ok and result.output else "failed"


@dataclass
class Ingested:
    chat: list[dict[str, Any]]     # the agent's context window, chat messages
    observations: str              # the observation log (as stored)
    observation_tokens: int        # counted with the project's counter
    raw_messages: int              # messages of the window not yet observed
    observer_calls: int
    reflector_calls: int
    outcomes: dict[str, int]
    generation: int
    events: dict[str, int]
    rejected: list[str]
    calls: list[dict[str, Any]]    # per model call: kind, seconds (measured), tokens


async def ingest(conversation: Conversation, thread: str, om: Any, messages: list[Any], *,
                 timeout: float = 1800.0) -> Ingested:
    """Fold the messages with real model calls (`simulation.simulate`), then build the agent's
    context window from the fold's events, as the read side does."""
    from omstream.engine.tokens import get_counter
    from omstream.projections.context import ContextProjection, context_messages
    from omstream.simulation import simulate

    with tqdm(total=len(messages), unit="msg", desc="ingest", file=sys.stderr, mininterval=0) as bar:
        sim = await simulate(messages, om, progress=bar.update, timeout=timeout)
    projection = ContextProjection(time_zone=om.time_zone)
    for event in sim.events:
        projection.apply_event(event)
    view = projection.view(thread)
    chat = context_messages(view)
    kinds = Counter(job.kind for job in sim.jobs)
    outcomes = Counter({"clean": 0, "recovered": 0, "failed": 0})
    calls = []
    for result in sim.results:
        if result.kind in ("observe", "buffer"):
            outcomes[observer_outcome(result)] += 1
        usage = result.usage
        calls.append({"kind": result.kind, "ok": result.ok, "attempts": result.attempts,
                      "seconds": round((result.completed_at - result.started_at).total_seconds(), 1),
                      "inputTokens": usage.input_tokens if usage else None,
                      "outputTokens": usage.output_tokens if usage else None})
    counter = get_counter(om.token_counter)
    state = next(iter(sim.states.values()), None)
    return Ingested(
        chat=chat, observations=view.observations,
        observation_tokens=counter.count(view.observations) if view.observations else 0,
        raw_messages=len(view.unobserved()),
        observer_calls=kinds["observe"] + kinds["buffer"],
        reflector_calls=kinds["reflect"] + kinds["buffer-reflection"],
        outcomes=dict(outcomes), generation=state.generation if state is not None else 0,
        events=dict(sorted(Counter(e.type for e in sim.events).items())), rejected=list(sim.rejected),
        calls=calls)


# --- contexts ----------------------------------------------------------------------------------------
def render_transcript(conversation: Conversation, turns: Sequence[tuple[Session, Turn]]) -> str:
    """LoCoMo's transcript format: the opening, then per session `DATE:` / `CONVERSATION:` and
    one `<speaker> said, "<text>"` line per turn."""
    out = [CONV_START.format(conversation.speaker_a, conversation.speaker_b)]
    current = None
    for session, turn in turns:
        if session.number != current:
            out.append(f"\nDATE: {session.date_time}\nCONVERSATION:\n")
            current = session.number
        out.append(f'{turn.speaker} said, "{turn.content()}"\n')
    return "".join(out)


def chat_tokens(chat: Sequence[dict[str, Any]], counter: Any) -> int:
    """Tokens of chat messages: their text with the project's counter, 3.8 per message."""
    total = 0.0
    for message in chat:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        total += counter.count(content or "") + TOKENS_PER_MESSAGE
    return round(total)


def transcript_chat(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": text}]


def recent_within(conversation: Conversation, budget: int, counter: Any) -> tuple[list[dict[str, Any]], int]:
    """The most recent turns whose transcript fits `budget` tokens (as `chat_tokens` counts
    it), and how many turns that is: the longest suffix that fits (binary search; the
    transcript only grows with more turns)."""
    turns = conversation.turns()

    def size(n: int) -> int:
        return chat_tokens(transcript_chat(render_transcript(conversation, turns[len(turns) - n:] if n else [])),
                           counter)

    low, high = 0, len(turns)
    while low < high:
        mid = (low + high + 1) // 2
        if size(mid) <= budget:
            low = mid
        else:
            high = mid - 1
    return transcript_chat(render_transcript(conversation, turns[len(turns) - low:] if low else [])), low


# --- answering ---------------------------------------------------------------------------------------
async def ask(model: str, messages: list[dict[str, Any]], *, seed: int, max_tokens: int = MAX_ANSWER_TOKENS,
              timeout: float = 900.0) -> tuple[str, dict[str, Any]]:
    """One reader call through litellm (a `local/` model through its in-process server, as
    `models.calls` routes it); returns the reply and its usage."""
    from omstream.models import local
    from omstream.models.calls import complete, litellm_model_name

    arguments: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0.0}
    if local.is_local(model):
        # Greedy and without penalties: a short answer should copy the context's words.
        arguments.update(frequency_penalty=0.0, repeat_penalty=1.0, seed=seed)
    response = await complete(litellm_model_name(model), messages, timeout=timeout, arguments=arguments,
                              num_retries=0 if local.is_local(model) else 3)
    usage = getattr(response, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    return (response.choices[0].message.content or "", {
        "promptTokens": getattr(usage, "prompt_tokens", None),
        "cachedTokens": getattr(details, "cached_tokens", None),  # the server's prompt cache, when it says
        "completionTokens": getattr(usage, "completion_tokens", None)})


def question_options(questions: Sequence[QA], seed: int) -> dict[int, dict[str, str] | None]:
    """Category 5 option orders, one seeded draw per question (the same in every condition)."""
    out: dict[int, dict[str, str] | None] = {}
    for qa in questions:
        if qa.category == 5:
            _, out[qa.index] = locomo.choice_prompt(qa, random.Random(f"{seed}:{qa.index}"))
        else:
            out[qa.index] = None
    return out


async def answer_condition(name: str, context: list[dict[str, Any]], questions: Sequence[QA],
                           options: dict[int, dict[str, str] | None], model: str, seed: int,
                           timeout: float = 1800.0) -> list[dict[str, Any]]:
    rows = []
    for qa in tqdm(questions, desc=f"answer {name}", unit="q", file=sys.stderr):
        opts = options[qa.index]
        messages = [*context, {"role": "user", "content": locomo.question_prompt(qa, opts)}]
        started = time.monotonic()
        try:
            reply, usage = await ask(model, messages, seed=seed, timeout=timeout)
            error = None
        except Exception as exc:  # noqa: BLE001 - a failed call scores 0 and is reported
            reply, usage, error = "", {}, f"{type(exc).__name__}: {exc}"[:500]
        prediction = locomo.postprocess(reply, opts)
        rows.append({"reply": reply, "prediction": prediction, "score": locomo.score(prediction, qa),
                     "seconds": round(time.monotonic() - started, 2), **usage,
                     **({"error": error} if error else {})})
    return rows


# --- report -------------------------------------------------------------------------------------------
def summarise(questions: Sequence[QA], answers: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Mean score per condition: per category (`"1"`..`"5"`) and `"overall"`, with counts."""
    out: dict[str, dict[str, Any]] = {}
    for name, rows in answers.items():
        by_cat: dict[int, list[float]] = {}
        for qa, row in zip(questions, rows):
            by_cat.setdefault(qa.category, []).append(row["score"])
        scores = [row["score"] for row in rows]
        out[name] = {str(c): round(sum(v) / len(v), 4) for c, v in sorted(by_cat.items())}
        out[name]["overall"] = round(sum(scores) / len(scores), 4) if scores else None
    return out


def format_table(summary: dict[str, dict[str, Any]], counts: dict[int, int],
                 context_tokens: dict[str, int]) -> str:
    cats = sorted(counts)
    head = ["condition", *(f"{c} {locomo.CATEGORY_NAMES[c]} (n={counts[c]})" for c in cats),
            f"overall (n={sum(counts.values())})", "context tokens"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    for name, row in summary.items():
        cells = [name, *(f"{row.get(str(c), 0):.3f}" for c in cats),
                 f"{row['overall']:.3f}" if row["overall"] is not None else "-", str(context_tokens[name])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- the run ------------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo's locomo10.json (default: %(default)s)")
    p.add_argument("--conversation", type=int, default=0, help="sample index in the file (default 0; 5-9 are held out)")
    p.add_argument("--questions", type=int, default=40, help="questions to sample (default 40)")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="observer, reflector and reader: `local/qwen2.5-1.5b` (default) or any litellm model")
    p.add_argument("--out", type=Path, default=None, help="JSON report (default .omstream/bench/quality-conv<N>.json)")
    p.add_argument("--seed", type=int, default=0, help="question sample and option order (default 0)")
    p.add_argument("--max-sessions", type=int, default=None,
                   help="ingest only the first S sessions and ask only about them (development; "
                        "published figures use the whole conversation)")
    p.add_argument("--message-tokens", type=int, default=None, help="observation.messageTokens (default: scaled)")
    p.add_argument("--observation-tokens", type=int, default=None,
                   help="reflection.observationTokens (default: scaled)")
    p.add_argument("--conditions", default=",".join(CONDITIONS),
                   help=f"which to answer, comma-separated (default {','.join(CONDITIONS)})")
    p.add_argument("--call-timeout", type=float, default=1800.0,
                   help="seconds per observer/reflector call before it is retried (default 1800; "
                        "run_job's own 600 s is too short for the local model on a busy 2-core machine)")
    p.add_argument("--no-speaker-instruction", action="store_true",
                   help="no observation/reflection instruction naming the two speakers")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from omstream.engine.tokens import get_counter

    timings: dict[str, float] = {}
    t0 = time.monotonic()
    conversations = locomo.load(args.data)
    if not 0 <= args.conversation < len(conversations):
        raise SystemExit(f"--conversation {args.conversation}: the file has {len(conversations)}")
    if args.conversation >= 5:
        print("note: conversations 5-9 are held out; report them, do not tune on them", file=sys.stderr)
    full_conversation = conversations[args.conversation]
    conversation = locomo.truncated(full_conversation, args.max_sessions)
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    unknown = set(conditions) - set(CONDITIONS)
    if unknown:
        raise SystemExit(f"unknown condition(s) {sorted(unknown)}; choose from {', '.join(CONDITIONS)}")
    counter = get_counter(COUNTER)
    thread = thread_id(conversation, args.conversation)
    messages = messages_of(conversation, thread)
    per_session = session_tokens(conversation, messages, counter)
    scaled = thresholds(per_session)
    message_tokens = args.message_tokens or scaled[0]
    observation_tokens = args.observation_tokens or scaled[1]
    instruction = None if args.no_speaker_instruction else SPEAKER_INSTRUCTION.format(
        a=conversation.speaker_a, b=conversation.speaker_b)
    om = om_config(args.model, message_tokens, observation_tokens, instruction)
    questions = locomo.stratified_sample(conversation.qa, args.questions, args.seed)
    counts = dict(sorted(Counter(q.category for q in questions).items()))
    available = dict(sorted(Counter(q.category for q in conversation.qa).items()))
    timings["load"] = time.monotonic() - t0

    scope = (f"{len(conversation.sessions)} of {len(full_conversation.sessions)} sessions"
             if args.max_sessions else f"all {len(conversation.sessions)} sessions")
    print(f"conversation {args.conversation} ({conversation.sample_id}): {scope}, {len(messages)} messages, "
          f"{sum(per_session)} tokens ({COUNTER}); model {args.model}")
    print(f"thresholds: observation.messageTokens={message_tokens} reflection.observationTokens="
          f"{observation_tokens} (bufferTokens=false; scaled: {scaled[0]}/{scaled[1]})")
    print("questions sampled per category: " + ", ".join(
        f"{c} {locomo.CATEGORY_NAMES[c]} {counts[c]}/{available[c]}" for c in counts)
        + f" (seed {args.seed})")
    if not questions:
        raise SystemExit("no questions to ask (with --max-sessions, none has all its evidence in those sessions)")

    t = time.monotonic()
    ingested = await ingest(conversation, thread, om, messages, timeout=args.call_timeout)
    timings["ingest"] = time.monotonic() - t
    print(f"ingest: {ingested.observer_calls} observer and {ingested.reflector_calls} reflector calls, "
          f"observer outputs {ingested.outcomes}, {ingested.observation_tokens} observation tokens, "
          f"{ingested.raw_messages} messages still raw, {timings['ingest']:.0f} s")

    contexts: dict[str, list[dict[str, Any]]] = {}
    omstream_tokens = chat_tokens(ingested.chat, counter)
    recent_turns = None
    for name in conditions:
        if name == "omstream":
            contexts[name] = ingested.chat
        elif name == "recent":
            contexts[name], recent_turns = recent_within(conversation, omstream_tokens, counter)
        elif name == "full":
            contexts[name] = transcript_chat(render_transcript(conversation, conversation.turns()))
        else:
            contexts[name] = []
    context_tokens = {name: chat_tokens(chat, counter) for name, chat in contexts.items()}
    conversation_tokens = sum(per_session)

    options = question_options(questions, args.seed)
    answers: dict[str, list[dict[str, Any]]] = {}
    for name in conditions:
        t = time.monotonic()
        answers[name] = await answer_condition(name, contexts[name], questions, options, args.model, args.seed,
                                              args.call_timeout)
        timings[f"answer {name}"] = time.monotonic() - t
    timings["total"] = time.monotonic() - t0
    summary = summarise(questions, answers)

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
        "model": args.model,
        "seed": args.seed,
        "config": {"messageTokens": message_tokens, "observationTokens": observation_tokens,
                   "bufferTokens": False, "tokenCounter": COUNTER, "speakerInstruction": instruction,
                   "roles": "both speakers user, name prefixed", "maxAnswerTokens": MAX_ANSWER_TOKENS},
        "questionsPerCategory": {str(c): n for c, n in counts.items()},
        "questionsAvailablePerCategory": {str(c): n for c, n in available.items()},
        "f1": summary,
        "contextTokens": context_tokens,
        "conversationTokens": conversation_tokens,
        "observationTokens": ingested.observation_tokens,
        "compression": {
            "conversationPerOmstreamWindow": round(conversation_tokens / omstream_tokens, 3) if omstream_tokens else None,
            "conversationPerObservations": round(conversation_tokens / ingested.observation_tokens, 3)
            if ingested.observation_tokens else None},
        "recentTurns": recent_turns,
        "observerCalls": ingested.observer_calls,
        "reflectorCalls": ingested.reflector_calls,
        "generation": ingested.generation,
        "observerOutputs": ingested.outcomes,
        "observerOutputShares": {k: round(v / outcome_total, 3) for k, v in ingested.outcomes.items()}
        if outcome_total else {},
        "rawMessagesInWindow": ingested.raw_messages,
        "events": ingested.events,
        "rejected": ingested.rejected,
        "modelCalls": ingested.calls,
        "seconds": {k: round(v, 1) for k, v in timings.items()},
        "observations": ingested.observations,
        "questions": [
            {"index": qa.index, "category": qa.category, "question": qa.question, "answer": qa.answer,
             "evidence": list(qa.evidence), "options": options[qa.index],
             **{name: answers[name][i] for name in conditions}}
            for i, qa in enumerate(questions)],
    }
    print()
    print(format_table(summary, counts, context_tokens))
    print()
    compression = report["compression"]
    print(f"conversation {conversation_tokens} tokens; omstream window {omstream_tokens} "
          f"(x{compression['conversationPerOmstreamWindow']}), observations {ingested.observation_tokens} "
          f"(x{compression['conversationPerObservations']}); recent = last {recent_turns} turns")
    print(f"observer calls {ingested.observer_calls} (outputs: " + ", ".join(
        f"{k} {v} ({report['observerOutputShares'].get(k, 0):.0%})" for k, v in ingested.outcomes.items())
        + f"), reflector calls {ingested.reflector_calls}")
    print("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or ROOT / ".omstream" / "bench" / f"quality-conv{args.conversation}.json"
    report = asyncio.run(run(args))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
