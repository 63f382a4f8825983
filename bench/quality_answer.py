"""`bench.quality`'s contexts and reader: what each condition shows the reader, the reader's
calls (checkpointed per question), and the reader's speed measured at the start."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tqdm import tqdm

from . import locomo
from .locomo import QA, Conversation, Session, Turn
from .quality_store import BENCH_VERSION, CallLimit, Store, digest

__all__ = ["MAX_ANSWER_TOKENS", "answer_condition", "ask", "chat_tokens", "format_speed", "measure_speed", "model_identity", "protocol",
           "question_options", "recent_within", "render_transcript", "transcript_chat"]

TOKENS_PER_MESSAGE = 3.8
MAX_ANSWER_TOKENS = 32
#: LoCoMo's opening of a transcript (CONV_START_PROMPT, its typo fixed).
CONV_START = ("Below is a conversation between two people: {} and {}. The conversation takes place over "
              "multiple days and the date of each conversation is written at the beginning of the "
              "conversation.\n\n")
#: The fixed prompts of the speed check: a long one read (prompt speed), a short one answered at
#: length (generation speed).  Fixed, so that figures of two runs compare.
SPEED_READ = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog near the river bank." for i in range(20))
SPEED_WRITE = "Count from 1 to 100 in words, separated by commas."
SPEED_WRITE_TOKENS = 64


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


# --- the reader -----------------------------------------------------------------------------------------
def _arguments(model: str, max_tokens: int, seed: int) -> dict[str, Any]:
    from omstream.models import local

    arguments: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0.0}
    if local.is_local(model):
        # Greedy and without penalties: a short answer should copy the context's words.
        arguments.update(frequency_penalty=0.0, repeat_penalty=1.0, seed=seed)
    return arguments


def model_identity(model: str) -> dict[str, Any]:
    """What a model's answers depend on besides the request: for a `local/` model its weights
    (sha256) and the server's default sampling, which a request hash does not cover."""
    from omstream.models import local

    if not local.is_local(model):
        return {"model": model}
    return {"model": model, "sha256": local.spec(model).sha256, "sampling": local.SAMPLING,
            "serverSampling": local.SERVER_SAMPLING}


def protocol(model: str, seed: int) -> dict[str, Any]:
    """Everything of the answering besides the context that decides a reply: a checkpointed
    answer is reused only when all of it is unchanged."""
    return {"reader": model_identity(model), "arguments": _arguments(model, MAX_ANSWER_TOKENS, seed),
            "qaPrompt": locomo.QA_PROMPT,
            "temporal": locomo.TEMPORAL_SUFFIX, "choice": locomo.CHOICE_SUFFIX, "bench": BENCH_VERSION}


async def ask(model: str, messages: list[dict[str, Any]], *, seed: int, max_tokens: int = MAX_ANSWER_TOKENS,
              timeout: float = 900.0) -> tuple[str, dict[str, Any]]:
    """One reader call through litellm (a `local/` model through its in-process server, as
    `models.calls` routes it); returns the reply and its usage."""
    from omstream.models import local
    from omstream.models.calls import complete, litellm_model_name

    response = await complete(litellm_model_name(model), messages, timeout=timeout,
                              arguments=_arguments(model, max_tokens, seed),
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
                           options: dict[int, dict[str, str] | None], model: str, seed: int, store: Store,
                           limit: CallLimit, timeout: float = 1800.0) -> tuple[list[dict[str, Any]], int]:
    """Each question's answer in one condition, and how many came from the checkpoint.

    The checkpoint file is keyed by the context and the protocol, a line by the question's
    prompt, so a rerun asks only what is not answered yet.  Scores are recomputed from the
    stored reply (the scoring rules are not part of the key)."""
    return await answer_each(name, digest(context, protocol(model, seed)), questions, options, store,
                             lambda prompt: _answer(name, context, prompt, model, seed, limit, timeout))


async def answer_each(name: str, key: str, questions: Sequence[QA], options: dict[int, dict[str, str] | None],
                      store: Store, ask: Callable[[str], Awaitable[dict[str, Any]]]) -> tuple[list[dict[str, Any]], int]:
    """`ask(prompt)` for each question not answered under `key` yet (a row with "error" is not
    kept), each answer scored; and how many came from the checkpoint."""
    done = store.rows(f"answers-{name}", key)
    prompts = {qa.index: locomo.question_prompt(qa, options[qa.index]) for qa in questions}
    reused = sum(1 for qa in questions if digest(prompts[qa.index]) in done)
    rows = []
    with tqdm(total=len(questions), initial=reused, desc=f"answer {name}", unit="q", file=sys.stderr) as bar:
        for qa in questions:
            qkey = digest(prompts[qa.index])
            row = done.get(qkey)
            if row is None:
                row = await ask(prompts[qa.index])
                if "error" not in row:
                    store.append(f"answers-{name}", key, {"key": qkey, **row})
                    done[qkey] = row
                bar.update()
            prediction = locomo.postprocess(row["reply"], options[qa.index])
            rows.append({**{k: v for k, v in row.items() if k != "key"}, "prediction": prediction,
                         "score": locomo.score(prediction, qa)})
    return rows, reused


async def _answer(name: str, context: list[dict[str, Any]], prompt: str, model: str, seed: int,
                  limit: CallLimit, timeout: float) -> dict[str, Any]:
    limit.before(f"answer {name}")
    started = time.monotonic()
    try:
        reply, usage = await ask(model, [*context, {"role": "user", "content": prompt}], seed=seed, timeout=timeout)
        error = None
    except Exception as exc:  # noqa: BLE001 - a failed call scores 0, is reported, and is asked again next run
        reply, usage, error = "", {}, f"{type(exc).__name__}: {exc}"[:500]
    limit.count(f"answer {name}")
    return {"reply": reply, "seconds": round(time.monotonic() - started, 2), **usage,
            **({"error": error} if error else {})}


# --- speed -------------------------------------------------------------------------------------------------
async def measure_speed(model: str, timeout: float = 600.0) -> dict[str, Any]:
    """Prompt and generation tokens/s of `model` on two fixed prompts, so that a slow machine can
    be told from a slow change.  A local model is loaded first (its load is not timed).  Prompt
    speed: a ~400-token prompt answered with one token; generation speed: a short prompt
    answered with 64 tokens, less its (measured-speed) prompt time.  Hosted models' figures
    include the network.  Scripted models are not language models: nothing to measure."""
    from omstream.models import local

    if model.startswith("scripted/"):
        return {"model": model, "scripted": True}
    if local.is_local(model):
        await asyncio.to_thread(local.load, model)
    read_seconds, read = await _timed(model, SPEED_READ, 1, timeout)
    write_seconds, write = await _timed(model, SPEED_WRITE, SPEED_WRITE_TOKENS, timeout)
    prompt_tps = (read["promptTokens"] or 0) / read_seconds if read_seconds else None
    write_prompt = (write["promptTokens"] or 0) / prompt_tps if prompt_tps else 0.0
    generated = write["completionTokens"] or 0
    gen_seconds = max(write_seconds - write_prompt, 1e-3)
    return {"model": model, "promptTokens": read["promptTokens"], "promptSeconds": round(read_seconds, 2),
            "promptTokensPerSecond": round(prompt_tps, 1) if prompt_tps else None,
            "generatedTokens": generated, "generationSeconds": round(gen_seconds, 2),
            "generationTokensPerSecond": round(generated / gen_seconds, 1) if generated else None}


async def _timed(model: str, prompt: str, max_tokens: int, timeout: float) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    _, usage = await ask(model, [{"role": "user", "content": prompt}], seed=0, max_tokens=max_tokens,
                         timeout=timeout)
    return time.monotonic() - started, usage


def format_speed(speed: dict[str, Any]) -> str:
    if speed.get("scripted"):
        return f"{speed['model']}: scripted (fixed rules, not a language model: no speed to measure)"
    return (f"{speed['model']}: prompt {speed['promptTokensPerSecond']} tokens/s "
            f"({speed['promptTokens']} tokens in {speed['promptSeconds']} s), generation "
            f"{speed['generationTokensPerSecond']} tokens/s ({speed['generatedTokens']} tokens)")
