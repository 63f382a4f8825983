"""A corpus of real answers of the local model, kept as test fixtures.

    python -m bench.corpus --out tests/fixtures/local_model/ --prompt-version v1=<rev> --prompt-version v2

Builds real Observer prompts with the engine's own functions (`observer_system_prompt`,
`observer_user_prompt`, `render_transcript`) from the repository's conversations
(`examples/demo-conversation.jsonl`, `tests/fixtures/scenarios/*/conversation.jsonl`), in small
chunks of a few messages (~200-600 tokens) so a call takes well under a minute on two cores,
and a few Reflector prompts from what this batch observed.  Each call goes through
`omstream.models.calls.run_job` (litellm, the in-process llama.cpp server and its sampling), and
its raw answer is written as one JSON file as soon as it arrives, with the model, the settings,
the prompt (system prompt, user message and their sources), the usage, the seconds and the date.

The corpus in `tests/fixtures/local_model/` was made with `--max-tokens 256 --threads 1`
(the two cores were shared with other model processes) and these batches, interleaved:

- `v1`: the prompts before the small-model rewrite (`--prompt-version v1=<that commit>`);
- `v2`: a first rewrite (one answer: it wrote only the sections, no observations);
- `v3`: a second rewrite (times and date anchored in the task; it repeated previous observations);
- `v4`: the prompts now in the working tree (v3 plus a quote of where the new messages start).

Nothing in these files is edited by hand: a fixture is what the model said.  `--prompt-version`
labels the prompts of `streams/engine/prompting/prompts.py` at the time of the run (the label is recorded
with the sha256 of the system prompt), so batches made before and after a prompt change can be
compared; files that exist are skipped, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from omstream.engine.prompting import prompts as _working_prompts
from omstream.engine.prompting.parsing import parse_observer_output
from omstream.engine.prompting.transcript import TranscriptLine, render_transcript
from omstream.models.calls import run_job
from omstream.schemas.jobs import ChatMessage, ModelJob, request_hash

ROOT = Path(__file__).resolve().parent.parent
MODEL = "local/qwen2.5-1.5b"
DEMO = "examples/demo-conversation.jsonl"
LONG = "tests/fixtures/scenarios/long-thread/conversation.jsonl"
LONG_CUT = 700
PREVIOUS_LINES = 6  # at most this many earlier observation lines are shown, to keep prompts small


@dataclass(frozen=True)
class Chunk:
    name: str  # fixture stem after the version: demo-01, long-thread-03
    source: str  # repository path of the conversation
    indices: tuple[int, ...]  # 0-based line numbers in that file
    group: str  # chunks of one group are observed in order, each seeing the earlier answers
    cut: int | None = None  # each message's content cut to this many characters


def _load(path: str) -> list[dict]:
    return [json.loads(line) for line in (ROOT / path).read_text().splitlines() if line.strip()]


def chunks() -> list[Chunk]:
    """The demo in exchanges of two messages (~110 tokens); the long thread's messages
    (~560 tokens each) one at a time, cut to LONG_CUT characters, from its beginning, middle
    and end, so that a call stays short on a busy two-core machine."""
    out = [Chunk(f"demo-{i + 1:02d}", DEMO, (start, start + 1), "demo") for i, start in enumerate(range(0, 14, 2))]
    n = 0
    for group, start in (("long-a", 0), ("long-b", 58), ("long-c", 112)):
        for index in range(start, start + 4):
            n += 1
            out.append(Chunk(f"long-thread-{n:02d}", LONG, (index,), group, LONG_CUT))
    return out


def transcript(messages: list[dict], cut: int | None = None) -> str:
    def content(text: str) -> str:
        return text if cut is None or len(text) <= cut else text[:cut].rsplit(" ", 1)[0] + " ..."
    return render_transcript(
        TranscriptLine(datetime.fromisoformat(m["createdAt"].replace("Z", "+00:00")),
                       m["role"].capitalize(), content(m["content"])) for m in messages)


def _tail(observations: str, lines: int = PREVIOUS_LINES) -> str:
    kept = [line for line in observations.split("\n") if line.strip()]
    return "\n".join(kept[-lines:])


def _job(kind: str, name: str, system: str, user: str, settings: dict) -> ModelJob:
    messages = (ChatMessage(role="system", content=system), ChatMessage(role="user", content=user))
    return ModelJob(
        kind=kind, cycle_id=f"corpus-{name}", memory_key="thread:corpus", thread_id="corpus",
        generation=0, model=MODEL, messages=messages, settings=settings,
        request_hash=request_hash(MODEL, messages, settings),
        created_at=datetime.now(UTC))


def _sampling(settings: dict) -> dict:
    """What the call was sampled with: the local defaults, then the job's settings."""
    from omstream.models import local
    from omstream.models.calls import translate_settings
    return {**local.SAMPLING, **local.SERVER_SAMPLING, **translate_settings(settings)}


async def _call(out: Path, stem: str, *, kind: str, version: str, origin: str, system: str,
                user: str, source: dict, settings: dict) -> dict:
    job = _job(kind, stem, system, user, settings)
    t0 = time.monotonic()
    result = await run_job(job, timeout=900.0)
    seconds = round(time.monotonic() - t0, 1)
    usage = result.usage
    fixture = {
        "model": MODEL,
        "kind": kind,
        "prompt_version": version,
        "prompts_source": origin,
        "settings": _sampling(settings),
        "source": source,
        "system_prompt_sha256": hashlib.sha256(system.encode()).hexdigest(),
        "system_prompt": system,
        "user_message": user,
        "ok": result.ok,
        "error": result.error,
        "raw_output": result.output or "",
        "usage": {"input_tokens": usage.input_tokens if usage else None,
                  "output_tokens": usage.output_tokens if usage else None},
        "seconds": seconds,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    path = out / f"{stem}.json"
    path.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n")
    print(f"{path.name}: ok={result.ok} {seconds}s out={fixture['usage']['output_tokens']} tokens",
          flush=True)
    return fixture


def _observed(fixture: dict, previous: str) -> str:
    """What the engine would append to the log: the parsed answer, without repeats of `previous`."""
    return parse_observer_output(fixture["raw_output"], previous).observations if fixture["ok"] else ""


#: The prompts module, and where it was before the engine had rooms (issue 41).
PROMPTS = "streams/engine/prompting/prompts.py"
FLAT_PROMPTS = "streams/engine/prompts.py"


def prompts_at(rev: str | None) -> tuple[types.ModuleType, str]:
    """The engine's prompt module as in the working tree, or as at git revision `rev` (to
    re-run an earlier prompt version), and where it came from.  An earlier revision's module is
    loaded in today's `prompting` room, so its relative imports read today's modules: one from
    before the rooms that imports a module since moved (`.reflection_plan`) does not load."""
    if not rev:
        return _working_prompts, f"working tree: {PROMPTS}"
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    where = PROMPTS if subprocess.run(["git", "cat-file", "-e", f"{sha}:{PROMPTS}"], cwd=ROOT,
                                      capture_output=True).returncode == 0 else FLAT_PROMPTS
    text = subprocess.run(["git", "show", f"{sha}:{where}"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="om-prompts-")) / "prompts.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"omstream.engine.prompting.prompts_{sha[:12]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, f"git {sha}: {where}"


async def batch(out: Path, version: str, prompts_rev: str | None, *, max_tokens: int,
                only: str | None):
    """One prompt version's calls, in order; yields after each call (so batches interleave)."""
    settings = {"maxOutputTokens": max_tokens}
    prompts, origin = prompts_at(prompts_rev)
    system = prompts.observer_system_prompt()
    observed: dict[str, list[str]] = {}
    for chunk in chunks():
        stem = f"{version}-{chunk.name}"
        path = out / f"{stem}.json"
        if path.exists():
            fixture = json.loads(path.read_text())
        elif only == "reflect":  # reflect on what the batch has observed so far
            continue
        else:
            rows = _load(chunk.source)
            previous = "\n".join(observed.get(chunk.group, []))
            user = prompts.observer_user_prompt(
                transcript=transcript([rows[i] for i in chunk.indices], chunk.cut),
                previous_observations=_tail(previous))
            source = {"file": chunk.source, "lines": [i + 1 for i in chunk.indices],
                      "content_cut_to_chars": chunk.cut,
                      "previous_observations_from": [
                          f"{version}-{c.name}" for c in chunks()
                          if c.group == chunk.group and c.name < chunk.name][-1:]}
            fixture = await _call(out, stem, kind="observe", version=version, origin=origin,
                                  system=system, user=user, source=source, settings=settings)
            yield
        observed.setdefault(chunk.group, []).append(
            _observed(fixture, "\n".join(observed.get(chunk.group, []))))
    if only == "observe":
        return
    # The Reflector: what this batch observed of the demo (level 0), of the long thread (level 1).
    for name, groups, level in (("reflect-demo", ["demo"], 0),
                                ("reflect-long-thread", ["long-a", "long-b", "long-c"], 1)):
        stem = f"{version}-{name}"
        if (out / f"{stem}.json").exists():
            continue
        text = "\n".join(o for g in groups for o in observed.get(g, []) if o)
        if not text:
            print(f"{stem}: nothing observed to reflect on", file=sys.stderr)
            continue
        await _call(out, stem, kind="reflect", version=version, origin=origin,
                    system=prompts.reflector_system_prompt(),
                    user=prompts.reflector_user_prompt(observations=text, level=level),
                    source={"observations_from": [f"{version}-{c.name}" for c in chunks()
                                                  if c.group in groups], "level": level},
                    settings=settings)
        yield


async def run(out: Path, versions: list[tuple[str, str | None]], *, max_tokens: int,
              only: str | None, limit: int | None) -> None:
    """The batches of `versions` ((label, git revision of the prompts or None), ...), one call
    of each in turn."""
    out.mkdir(parents=True, exist_ok=True)
    running = [batch(out, v, rev, max_tokens=max_tokens, only=only).__aiter__() for v, rev in versions]
    calls = 0
    while running and (limit is None or calls < limit):
        for gen in list(running):
            try:
                await gen.__anext__()
                calls += 1
            except StopAsyncIteration:
                running.remove(gen)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests/fixtures/local_model")
    parser.add_argument("--prompt-version", action="append", metavar="LABEL[=REV]",
                        help="a batch: its label (file prefix) and the git revision of "
                        "streams/engine/prompting/prompts.py it uses (default: the working tree); repeat to "
                        "interleave batches, e.g. --prompt-version v1=HEAD --prompt-version v2")
    parser.add_argument("--max-tokens", type=int, default=256,
                        help="output cap per call (256: a loop still shows, a call stays ~1-3 min on a shared CPU)")
    parser.add_argument("--only", choices=["observe", "reflect"])
    parser.add_argument("--limit", type=int, help="stop after this many new calls")
    parser.add_argument("--context", type=int, default=8192, help="context per slot")
    parser.add_argument("--threads", type=int, default=0,
                        help="llama.cpp threads (0: every core; 1 when other processes share the CPU)")
    args = parser.parse_args(argv)
    versions = [(label, rev or None) for label, _, rev in
                (v.partition("=") for v in args.prompt_version or ["v2"])]
    from omstream.models import local
    # One server slot per batch, so that each batch's system prompt stays in its slot's cache.
    local.configure(threads=args.threads or None, slots=len(versions), context=args.context)
    asyncio.run(run(args.out, versions, max_tokens=args.max_tokens, only=args.only,
                    limit=args.limit))


if __name__ == "__main__":
    main()
