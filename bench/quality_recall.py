"""`bench.quality`'s fifth condition, `omstream+recall`: the reader gets omstream's window and may
call `recall` before it answers, at most `--recall-calls` times per question.

The answers come from the product's own handler (`omstream.projections.recall.recall`) over a
`RecallSource` of a `ContextProjection` fed the very events the ingest's fold produced (the read
side `om serve` keeps, built in-process: no broker, no HTTP).  The window is exactly condition
`omstream`'s, so the two compare: the ingest runs without `retrieval`, as for every condition.

Only mode `messages` (and `threads`) can answer here.  Mode `search` needs the semantic index,
which is a projection of *observation groups*, and the fold writes groups only with
`retrieval` on; turning it on for the bench would change the memory itself (the group tags count
towards the reflection threshold, so reflections come earlier and the Observer's later prompts
differ): another ingest with its own model calls and another window than `omstream`'s.  A
`search` call is therefore passed to the handler without a search port and gets the handler's
own "Search is not configured" answer.

The protocol is text, the same for every reader (a 1.5B local model follows it; hosted
models could take OpenAI-style `tools`, but one protocol keeps the readers comparable):

1. the reader sees the window, then the guide (`GUIDE`: each session's date and the recall call
   that reads it, in place of the group ranges a window with retrieval on shows), then the
   question, as in condition `omstream`;
2. a reply whose first line is `RECALL: <message id>`, `RECALL: start` or `RECALL: {json}` (any of
   the tool's parameters, camelCase) is a recall call: the bench runs the handler and asks again with the
   reply and `Recall result:` + the answer appended, then the question again;
3. after `cap` calls the reader is asked once more *without the option*: the window alone (no
   guide), then what its recalls read, then the question (`FINAL`).  A small reader told "no more
   recalls" beside a guide that still offers them asked again (all four recall questions of a
   held-out run ended with no answer); a prompt that offers nothing can only be answered.  Its
   reply is the answer, less any leading `RECALL:` lines (not executed).

Checkpoints: each reader call is kept by the digest of its messages (`steps-<condition>-<key>`),
so a run stopped between a question's calls resumes without asking one twice, and each finished
question's row by its prompt's digest (`answers-<condition>-<key>`, as for the other
conditions), with its recall calls, their parameters and results.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .locomo import QA, Conversation
from .quality_answer import answer_each, ask, protocol
from .quality_store import CallLimit, Store, digest, source_digest

__all__ = ["CONDITION", "DEFAULT_CALLS", "GUIDE", "Recaller", "answer_with_recall", "final", "final_messages",
           "guide_message", "parse_recall", "recall_summary", "session_index", "shown"]

CONDITION = "omstream+recall"
DEFAULT_CALLS = 2
GUIDE = """You can read the original messages of the conversation with the recall tool before you answer.
To read a session, reply with its RECALL line below, exactly, and nothing else:
{sessions}

You get up to 20 messages with their ids (`RECALL: <message id>` reads the 20 after that id), then you \
answer. At most {cap} recalls per question. If your observations already hold the answer, answer directly."""
RESULT = "Recall result:\n{result}\n\n{question}"
FINAL = "Messages you read from the conversation:\n\n{results}\n\n{question}"
_RECALL = re.compile(r"^\s*\**RECALL\**\s*:\s*(?P<arg>.+?)\s*$", re.IGNORECASE)


def session_index(conversation: Conversation, thread: str) -> str:
    """One line per session: its date and the recall call that reads it, in the tool's own terms
    (a window with retrieval on shows group ranges instead).  A cursor pages *after* its
    message, so a session is read from the last message of the one before; the first from the
    thread's start.  Ids are the ingest's, `<thread>:<session>:<turn>` (`quality_ingest`)."""
    lines, before = [], None
    for s in conversation.sessions:
        if not s.turns:
            continue
        call = f"RECALL: {before}" if before else "RECALL: start"
        # The line to copy first, the date after it: the 1.5B model copied the date otherwise.
        lines.append(f"{call}   (session {s.number}, {s.date_time})")
        before = f"{thread}:{s.number}:{len(s.turns)}"
    return "\n".join(lines)


def guide_message(conversation: Conversation, thread: str, cap: int) -> dict[str, Any]:
    return {"role": "system", "content": GUIDE.format(sessions=session_index(conversation, thread), cap=cap)}


def parse_recall(reply: str) -> dict[str, Any] | None:
    """The recall parameters of a reply whose first non-empty line is `RECALL: ...`, else None
    (an answer).  A JSON object is taken as the tool's parameters (not advertised in the guide: the
    1.5B model mangles JSON it is shown); `start` / `end` as the thread read from its start / end
    (`anchor`); anything else as a message id to page forward from (`cursor`), its first word (a
    guide line copied whole still names its id)."""
    first = next((line for line in (reply or "").splitlines() if line.strip()), "")
    found = _RECALL.match(first)
    if found is None:
        return None
    arg = found.group("arg").strip()
    if arg.startswith("{"):
        try:
            value = json.loads(arg)
        except json.JSONDecodeError:
            return {"_unparsed": arg}
        return value if isinstance(value, dict) else {"_unparsed": arg}
    arg = arg.split()[0].strip("`'\"")  # an id has no space: "<id>   (session 2, ...)" copied whole
    if arg.lower() in ("start", "end"):  # the tool's `anchor`: the thread from its start or end
        return {"mode": "messages", "anchor": arg.lower()}
    return {"mode": "messages", "cursor": arg}


@dataclass
class Recaller:
    """The recall handler over the ingest's events, for the conversation's thread (thread scope:
    a LoCoMo conversation is one thread)."""

    source: Any   # omstream.projections.recall.RecallSource
    caller: Any   # omstream.projections.recall.Caller

    @classmethod
    def of_events(cls, events: Sequence[Any], thread: str, om: Any) -> Recaller:
        from omstream.engine.rules.tokens import get_counter
        from omstream.projections.recall import Caller, RecallSource
        from omstream.projections.views.context import ContextProjection
        from omstream.schemas.keys import memory_key

        projection = ContextProjection(time_zone=om.time_zone)
        for event in events:
            projection.apply_event(event)
        view = projection.threads.get(thread)
        key = (view.memory_key if view is not None else None) or memory_key(om, thread, None)
        return cls(RecallSource(projection, get_counter(om.token_counter)), Caller(thread, None, key, "thread"))

    async def call(self, raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The handler's answer to the reader's parameters, and the text the reader is shown
        (a refused call's reason, as the tool gives it to a model)."""
        from omstream.projections.recall import RecallError, parse_params, recall

        if "_unparsed" in raw:
            answer: dict[str, Any] = {"error": f"the arguments are not a JSON object: {raw['_unparsed']}"}
        else:
            try:
                answer = await recall(self.source, self.caller, parse_params(raw), None)
            except RecallError as exc:
                answer = {"error": str(exc)}
        return answer, shown(answer)


def shown(answer: dict[str, Any]) -> str:
    """What the reader reads of a handler answer: the rendered messages (with the paging the
    answer reports), a search's results, or the error; anything else as JSON."""
    if "error" in answer:
        return f"error: {answer['error']}"
    if isinstance(answer.get("messages"), str):
        more = [x for x, on in (("more after: page 2", answer.get("hasNextPage")),
                                ("more before: page -1", answer.get("hasPrevPage"))) if on]
        return str(answer["messages"]) + (f"\n({'; '.join(more)})" if more else "")
    if isinstance(answer.get("results"), str):
        return str(answer["results"])
    return json.dumps(answer, ensure_ascii=False)


def recall_sources() -> list[Path]:
    """The handler's code: a change there gives the condition's answers new keys."""
    from omstream.projections import recall as package

    return sorted(Path(package.__file__).parent.glob("*.py"))


async def answer_with_recall(context: list[dict[str, Any]], questions: Sequence[QA],
                             options: dict[int, dict[str, str] | None], model: str, seed: int, store: Store,
                             limit: CallLimit, recaller: Recaller, cap: int, conversation_key: str,
                             timeout: float = 1800.0, name: str = CONDITION) -> tuple[list[dict[str, Any]], int]:
    """Each question's answer with recall, and how many came from the checkpoint.  `context` is
    the window followed by the guide; `conversation_key` a digest of the messages the handler
    reads (the window does not hold them all)."""
    key = digest(context, protocol(model, seed), {"cap": cap, "result": RESULT, "final": FINAL,
                                                  "handler": source_digest(recall_sources()),
                                                  "bench": source_digest([Path(__file__)]),
                                                  "messages": conversation_key})
    steps = _Steps(store, f"steps-{name}", key, store.rows(f"steps-{name}", key))
    return await answer_each(name, key, questions, options, store, lambda prompt: _question(
        context, prompt, model, seed, limit, recaller, cap, steps, timeout, name))


@dataclass
class _Steps:
    """The reader calls of the condition, by the digest of their messages."""

    store: Store
    phase: str
    key: str
    rows: dict[str, dict[str, Any]]

    async def ask(self, messages: list[dict[str, Any]], model: str, seed: int, limit: CallLimit,
                  timeout: float, name: str) -> dict[str, Any]:
        skey = digest(messages)
        row = self.rows.get(skey)
        if row is not None:
            return row
        limit.before(f"answer {name}")
        started = time.monotonic()
        try:
            reply, usage = await ask(model, messages, seed=seed, timeout=timeout)
            row = {"reply": reply, "seconds": round(time.monotonic() - started, 2), **usage}
        except Exception as exc:  # noqa: BLE001 - a failed call scores 0, is reported, and is asked again next run
            row = {"reply": "", "seconds": round(time.monotonic() - started, 2),
                   "error": f"{type(exc).__name__}: {exc}"[:500]}
        limit.count(f"answer {name}")
        if "error" not in row:
            self.store.append(self.phase, self.key, {"key": skey, **row})
            self.rows[skey] = row
        return row


async def _question(context: list[dict[str, Any]], prompt: str, model: str, seed: int, limit: CallLimit,
                    recaller: Recaller, cap: int, steps: _Steps, timeout: float, name: str) -> dict[str, Any]:
    messages = [*context, {"role": "user", "content": prompt}]
    recalls: list[dict[str, Any]] = []
    seconds, prompt_tokens, completion_tokens = 0.0, 0, 0
    while True:
        step = await steps.ask(messages, model, seed, limit, timeout, name)
        seconds += step.get("seconds") or 0.0
        prompt_tokens += step.get("promptTokens") or 0
        completion_tokens += step.get("completionTokens") or 0
        if "error" in step:
            return {"reply": "", "error": step["error"], "recalls": recalls, "recallCalls": len(recalls)}
        params = parse_recall(step["reply"]) if len(recalls) < cap else None
        if params is None:
            return {"reply": final(step["reply"]), "raw": step["reply"], "seconds": round(seconds, 2),
                    "promptTokens": prompt_tokens, "completionTokens": completion_tokens, "readerCalls": len(recalls) + 1,
                    "recallCalls": len(recalls), "recalls": recalls}
        answer, text = await recaller.call(params)
        recalls.append({"request": step["reply"].strip().splitlines()[0], "params": params,
                        "error": answer.get("error"), "result": text})
        if len(recalls) >= cap:
            messages = final_messages(context, recalls, prompt)
        else:
            messages = [*messages, {"role": "assistant", "content": step["reply"]},
                        {"role": "user", "content": RESULT.format(result=text, question=prompt)}]


def final_messages(context: list[dict[str, Any]], recalls: Sequence[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The last ask of a question whose recalls reached the cap: the window without the guide
    (`context` ends with it), what the recalls read (not their refusals), then the question."""
    read = [r["result"] for r in recalls if not r.get("error")] or ["(nothing)"]
    return [*context[:-1], {"role": "user", "content": FINAL.format(results="\n\n".join(read), question=prompt)}]


def final(reply: str) -> str:
    """The answer in a last reply: its leading `RECALL:` lines are calls past the cap, not executed
    and not the answer (the small model writes `RECALL: ...` then its answer on the next line);
    a reply of nothing but them stays as it is, and scores as such."""
    lines = (reply or "").splitlines()
    while lines and (not lines[0].strip() or parse_recall(lines[0]) is not None):
        lines.pop(0)
    return "\n".join(lines) if lines else reply


def recall_summary(rows: Sequence[dict[str, Any]], cap: int) -> dict[str, Any]:
    """Recall calls made, questions that used recall, calls the handler refused, questions that
    reached the cap, last replies that still began with a recall line (not executed), and those
    that held nothing else (no answer)."""
    calls = sum(r.get("recallCalls", 0) for r in rows)
    return {"cap": cap, "calls": calls, "questions": len(rows),
            "questionsUsingRecall": sum(1 for r in rows if r.get("recallCalls")),
            "refused": sum(1 for r in rows for c in r.get("recalls", ()) if c.get("error")),
            "capReached": sum(1 for r in rows if r.get("recallCalls", 0) >= cap),
            "recallPastCap": sum(1 for r in rows if parse_recall(r.get("raw", r.get("reply", ""))) is not None),
            "noAnswerPastCap": sum(1 for r in rows if parse_recall(r.get("reply", "")) is not None)}
