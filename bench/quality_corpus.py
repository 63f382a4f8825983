"""`python -m bench.quality ... --export-corpus DIR`: a quality run's Observer and Reflector
answers as fixtures of the parser's real-output corpus (`tests/fixtures/local_model/`, read by
`tests/unit/engine/test_local_outputs.py`; the format `bench/corpus.py` writes).

Each line of the call checkpoint (`calls-<models>.jsonl`) keeps the call's prompt with its
answer, and the export writes one fixture per answer, in the order the calls were made: the
prompt (system prompt and user message, as sent) and the model's raw answer, untouched.  Lines
written before the prompt was kept (runs of earlier versions of the bench) hold only the
answer: for those the export folds the conversation again with the run's own arguments (the
same `--conversation`, `--max-sessions`, thresholds and models), serving every call from the
checkpoint and stopping at the first it lacks (no model is called), which finds them only with
the engine code the run had (another parser or prompt makes other requests).

A fixture is `<label>-conv<N>-<kind>-<NNN>.json` (`label` is its `prompt_version`, default
`lq`: the prompts of a `bench.quality` run, whose system prompt carries the speaker instruction),
numbered in the order of the fold; files that exist are left as they are.  LoCoMo's text is
CC BY-NC and never enters the repository: the prompt's copy of the messages is replaced by a
line naming how many there were and their digest (`redact`; `--corpus-keep-text` keeps it, for a
look outside the repository); the previous observations and the answer, the model's own words,
are kept.  Also written:
`parsed_at_export`, what the parser said of the answer when it was exported (outcome and
recoveries, with the previous observations the prompt showed), which the corpus test holds the
parser to: a parser change that reads an exported answer differently shows there, and whoever
makes it re-exports (delete the files) once the new reading is checked.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .quality_store import CallCache, CallLimit, StopRequested, Store, request_of

__all__ = ["export_corpus", "fixture_of", "previous_of", "redact"]

KINDS = {"observe": "observe", "buffer": "observe", "reflect": "reflect", "buffer-reflection": "reflect"}
_NEW = "## New Message History to Observe\n\n"
_QUOTED = re.compile(r'"User \([^)\n]*\): [^"\n]*"')
MIN_LINE = 12  # a shorter piece of a message ("Thanks!") says nothing of the data set


def redact(user: str, texts: list[str]) -> tuple[str, int]:
    """The Observer prompt without LoCoMo's own words (CC BY-NC: the data set never enters the
    repository): the messages to observe become one line naming how many there were and their
    digest, a quoted message in the task becomes `"[a LoCoMo message]"`, and any other line of a
    message left after the heading is replaced as well.  The previous observations (the model's
    own words, like its answer) stay: the parser reads them.  Returns the text and how many
    pieces were replaced."""
    head, found, rest = user.partition(_NEW)
    if not found:
        return user, 0
    section, sep, tail = rest.partition("\n\n---\n\n")
    lines = [x for x in section.splitlines() if x.strip()]
    marker = (f"[{len(lines)} lines of LoCoMo messages, not copied (the data set is CC BY-NC); sha256 "
              f"{hashlib.sha256(section.encode()).hexdigest()[:16]}; the source's requestHash names the prompt]")
    tail, quoted = _QUOTED.subn('"[a LoCoMo message]"', tail)
    replaced = len(lines) + quoted
    for text in texts:
        for piece in (x.strip() for x in text.splitlines()):
            if len(piece) >= MIN_LINE and piece in tail:
                tail = tail.replace(piece, "[a LoCoMo message]")
                replaced += 1
    return head + found + marker + sep + tail, replaced


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def previous_of(kind: str, user: str) -> str:
    """The previous observations an Observer prompt showed (the parser drops repeats of them),
    by the rule of the corpus test (`tests/unit/engine/test_local_outputs.py::_previous`)."""
    head = "## Previous Observations\n\n"
    if kind != "observe" or not user.startswith(head):
        return ""
    return user[len(head):].split("\n\n---\n\n")[0]


def fixture_of(request: dict[str, Any], stored: Any, *, label: str, source: dict[str, Any],
               texts: list[str] | None = None) -> dict[str, Any]:
    """One corpus fixture: the request's prompt (`quality_store.request_of`) and the stored answer
    (`stored`: the result as the model gave it, with its measured time).  With `texts` (the
    conversation's messages) the prompt's copy of them is left out (`redact`)."""
    from omstream.engine.prompting.parsing import parse_observer_output, parse_outcome
    from omstream.models import local
    from omstream.models.calls import translate_settings

    messages = request["messages"]
    kind = KINDS.get(request["kind"], request["kind"])
    system = "\n\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
    user = "\n\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
    previous = previous_of(kind, user)
    if texts is not None:
        user, replaced = redact(user, texts)
        source = {**source, "messagesLeftOut": replaced}
    model = request["model"]
    settings = {**(local.SAMPLING if local.is_local(model) else {}),
                **(local.SERVER_SAMPLING if local.is_local(model) else {}),
                **translate_settings(request.get("settings") or {})}
    raw = stored.output or ""
    usage = stored.usage
    parsed = parse_observer_output(raw, previous) if raw else None
    return {
        "model": model, "kind": kind, "prompt_version": label,
        "prompts_source": "bench.quality run: streams/engine/prompts.py with the run's instruction",
        "settings": settings, "source": source,
        "system_prompt_sha256": hashlib.sha256(system.encode()).hexdigest(),
        "system_prompt": system, "user_message": user,
        "ok": bool(stored.ok), "error": stored.error, "raw_output": raw,
        "usage": {"input_tokens": usage.input_tokens if usage else None,
                  "output_tokens": usage.output_tokens if usage else None},
        "seconds": round((stored.completed_at - stored.started_at).total_seconds(), 1),
        "generated_at": stored.completed_at.astimezone(UTC).isoformat(timespec="seconds"),
        "parsed_at_export": {"outcome": parse_outcome(raw, previous) if raw else "failed",
                             "recoveries": sorted(parsed.recovered) if parsed else []},
    }


async def export_corpus(out: Path, store: Store, cache: CallCache, thread: str, om: Any, messages: list[Any], *,
                        label: str, conversation: int, keep_text: bool = False) -> list[Path]:
    """Write the fixtures, one per answer of the checkpoint in the order the calls were made;
    returns the paths written (existing ones are skipped).  The prompts' copy of the
    conversation is left out unless `keep_text` (for a local look, not to commit)."""
    requests = dict(cache.requests)
    folded = 0
    if len(requests) < len(cache.entries):  # lines written before the prompt was kept: fold again
        from .quality_ingest import ingest

        def seen(job: Any, _: Any) -> None:
            requests.setdefault(job.request_hash, request_of(job))

        try:
            await ingest(thread, om, messages, cache, CallLimit(0), on_call=seen)
        except StopRequested:
            pass
        folded = len(requests) - len(cache.requests)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    counts: dict[str, int] = {}
    unknown = 0
    texts = None if keep_text else [str(m.content) for m in messages]
    where = cache.path.relative_to(store.root.parent) if cache.path.is_relative_to(store.root.parent) else cache.path
    for request_hash in cache.entries:
        request = requests.get(request_hash)
        if request is None:  # neither kept nor met again (the run had other engine code)
            unknown += 1
            continue
        kind = KINDS.get(request["kind"], request["kind"])
        counts[kind] = counts.get(kind, 0) + 1
        path = out / f"{label}-conv{conversation}-{kind}-{counts[kind]:03d}.json"
        if path.exists():
            continue
        source = {"benchmark": "bench.quality (LoCoMo)", "conversation": conversation, "thread": thread,
                  "checkpoint": str(where), "requestHash": request_hash, "jobKind": request["kind"]}
        path.write_text(json.dumps(fixture_of(request, cache.original(request_hash), label=label, source=source,
                                              texts=texts), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    print(f"export: {len(cache.entries)} answers in {cache.path} ({len(cache.requests)} with their prompt, "
          f"{folded} found by folding the conversation again, {unknown} whose prompt is unknown: export "
          f"those with the engine code the run had); {len(written)} fixtures written to {out}, "
          f"{sum(counts.values()) - len(written)} already there", flush=True)
    print(f"export date: {datetime.now(UTC).isoformat(timespec='seconds')}")
    return written
