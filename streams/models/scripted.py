"""Scripted Observer and Reflector: deterministic local models, for tests, demos and parity runs.

They are real litellm models (`scripted/observer`, `scripted/reflector`) served by a
`litellm.CustomLLM` provider, so every call takes the same path as a hosted model.  Their
answers are computed from the prompt by fixed rules (`tests/fixtures/scenarios/README.md`): the observer
turns each transcript line into one bullet, the reflector shortens bullets by compression level.
They are named "scripted" on purpose: nothing here pretends to be a language model.

Word limits are settable per call through model settings (`userWords`, `assistantWords`,
`reflectionWords`), e.g. `observation.modelSettings = {userWords = 10}`; `latencyMs` makes each
call take that long before it answers (as a hosted model's call does; without blocking the
worker's event loop), so cycles stay open long enough for a test to act while they are.

Attachments: a request's user message may be a list of content parts (the transcript text, then
each forwarded image or file after a text part naming its placeholder).  Every scripted model
reads the text; `scripted/observer-vision` is the one multimodal model (`MODEL_INPUTS`, what
`observeAttachments = "auto"` reads) and reports each attachment it received as an observation
line, `Attachment received: [Image #1: cat.png] image_url https://...`, so a test can see from
the memory itself what reached the model.

`scripted/assistant` is the agent's side, for examples and tests of an agent loop: it answers a
chat (the `chat` of a context window) by echoing the last user message and counting the
observation bullets its system prompt holds, so a reader can see the memory reach the agent.

Failure injection (test-only settings that only this offline provider reads; do not set them
for a hosted model, which would receive them as unknown arguments):

- `failWith`: what goes wrong.  `'timeout'`, `'429'`, `'500'`, `'503'`, `'connection'`,
  `'401'`, `'400'` raise the matching litellm exception (`Timeout`, `RateLimitError`,
  `InternalServerError`, `ServiceUnavailableError`, `APIConnectionError`,
  `AuthenticationError`, `BadRequestError`), so the call takes litellm's real error path;
  `'malformed'` answers text with neither an `<observations>` block nor list lines;
  `'degenerate'` answers a looping text (a block of lines repeated 20 times, §7.6);
  `'hang'` never answers: the call sleeps for `HANG_SECONDS` (an hour), far beyond any job
  deadline, so the model agent's deadline (`job_deadline_ms`) is what ends it (`failTimes`
  and `failModel` apply as to the other failures).
- `failTimes`: how many calls fail before the model answers normally (default: every call).
  Calls are counted per request content (model, messages and these settings, hashed), so
  the same request fails the same way in every run; `reset_failures()` forgets the counts.
- `failModel`: fail only when the call is to this model (e.g. `'scripted/observer'`), so that
  a fallback model (`scripted/observer-b`, any name starting with `observer`) answers.

e.g. `modelSettings = {failWith = '429', failTimes = 2}`: two rate-limited calls, then an answer.
- `retryAfterMs`: a `'429'` carries a `retry-after-ms` header of this value, as providers send.

Rate-based injection (for chaos runs: a share of all requests fails, the same ones in every run):

- `failRate` (0 to 1): a request fails iff a hash of its model and messages (and `failSeed`,
  if set) falls under the rate; the others answer normally.  `failTimes` defaults to 1 here,
  so a retry of the same request (`[omstream] model_retries`) gets the normal answer.
- `failWith` may be a list of kinds: the hash chooses one per request (always the same one
  for the same request; without `failRate` every request fails, with the chosen kind).  An
  entry repeated weighs more.
- `failOnly`: `{kind = 'text'}`: that kind is drawn only for requests whose content contains
  the text (e.g. a marker in some threads' messages); a failing request draws among the kinds
  it may have, and none of them: it answers.  So unrecoverable kinds (`malformed`,
  `degenerate` end a cycle as failed) can be confined to a part of a run.

`planned_failure(model, messages, settings)` says which kind a request draws (without counting
the call), so a test can tell from the recorded jobs which requests were made to fail.

e.g. `modelSettings = {failRate = 0.3, failWith = ['timeout', '429', '500', 'malformed'],
failOnly = {malformed = 'FRAGILE'}}`.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
import time
from types import ModuleType
from typing import Any

import orjson

from .scripted_extract import inline_sections, structured_answer

__all__ = ["FAILURES", "MODEL_INPUTS", "content_text", "failure_for", "planned_failure", "reflect",
           "assist", "observe", "received_attachments", "register", "reset_failures", "takes_attachments"]

#: The `failWith` values the provider understands.
FAILURES = ("timeout", "429", "500", "503", "connection", "401", "400", "malformed", "degenerate", "hang")
#: How long a `failWith = 'hang'` call sleeps before it answers.
HANG_SECONDS = 3600.0
_FAIL_KEYS = ("failWith", "failTimes", "failModel", "failRate", "failSeed", "failOnly", "retryAfterMs")
_calls: dict[str, int] = {}
_calls_lock = threading.Lock()

_LINE = re.compile(r"^(?P<title>[^():\n]*?)(?: ?\((?P<time>\d{1,2}:\d{2} [AP]M)\))?: (?P<body>.*)$")
_DATE = re.compile(r"^(?P<mon>[A-Z][a-z]{2}) (?P<day>\d{1,2}) (?P<year>\d{4}):$")
_BULLET = re.compile(r"^(?P<prefix>\s*\* \S+ \(\d{2}:\d{2}\) )(?P<text>.*)$")
_LEVEL_HEADINGS = (
    ("## EXTREME COMPRESSION REQUIRED", 4),
    ("## CRITICAL COMPRESSION REQUIRED", 3),
    ("## AGGRESSIVE COMPRESSION REQUIRED", 2),
    ("## COMPRESSION REQUIRED", 1),
)
_REFLECTION_WORDS = (12, 8, 5, 3, 2)

#: What each scripted model reads, by the name after `scripted/`: the capability table the
#: "auto" attachment policy consults.  Any other `observer*` / `reflector*` name reads text.
MODEL_INPUTS: dict[str, frozenset[str]] = {
    "observer": frozenset({"text"}),
    "observer-vision": frozenset({"text", "image", "file"}),
    "reflector": frozenset({"text"}),
    "assistant": frozenset({"text"}),
}


def takes_attachments(model: str) -> bool | None:
    """Whether the scripted `model` reads images and files; None for a name it does not serve."""
    name = model.split("/", 1)[-1]
    if name in MODEL_INPUTS:
        return "image" in MODEL_INPUTS[name]
    return False if name.startswith(("observer", "reflector")) else None


def content_text(content: Any) -> str:
    """A message's text: the string, or the text parts of a list of content parts, in order."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def _parts(content: Any) -> list[Any]:
    """A message's content as content parts: a list as it is, text (or nothing) as one text part."""
    if isinstance(content, (list, tuple)):
        return list(content)
    return [{"type": "text", "text": content_text(content)}]


def _describe(part: dict[str, Any]) -> str:
    """An attachment part in a few words: its kind and where it is (a data: URI by its type)."""
    if part.get("type") == "image_url":
        image = part.get("image_url")
        source = image.get("url", "") if isinstance(image, dict) else str(image or "")
    else:
        given = part.get("file")
        file: dict[str, Any] = given if isinstance(given, dict) else {}
        source = file.get("file_data") or file.get("file_id") or ""
    if source.startswith("data:"):
        source = f"{source.split(',', 1)[0]} ({len(source)} characters)"
    return f"{part.get('type')} {source}"


def received_attachments(content: Any) -> list[str]:
    """Each non-text part of a list of content parts, named by the text part before it."""
    if not isinstance(content, (list, tuple)):
        return []
    out: list[str] = []
    name = ""
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            name = str(part.get("text", ""))
            continue
        out.append(f"{name} {_describe(part)}" if len(name) < 200 else _describe(part))
        name = ""
    return out


def _section(text: str, heading: str, *, until_rule: bool = False) -> str:
    start = text.find(heading)
    if start < 0:
        return ""
    body = text[start + len(heading):].split("\n")
    out: list[str] = []
    for line in body:
        if (until_rule and line == "---") or (not until_rule and line.startswith("## ")):
            break
        out.append(line)
    return "\n".join(out).strip("\n")


def _words(text: str, limit: int) -> str:
    words = text.split()
    return " ".join(words[:limit]) + (" ..." if len(words) > limit else "")


def _to_24h(label: str) -> str:
    clock, half = label.split(" ")
    hour, minute = (int(x) for x in clock.split(":"))
    hour = hour % 12 + (12 if half == "PM" else 0)
    return f"{hour:02d}:{minute:02d}"


def assist(system: str, user: str) -> str:
    """The scripted assistant's reply: the last user message's first words and how many
    observation bullets (`* ...` lines) the system prompt carries.  A window whose messages are
    all observed ends with a `<system-reminder>` in place of a user message: nothing to echo."""
    bullets = sum(1 for line in system.splitlines() if line.lstrip().startswith("* "))
    said = "" if user.startswith("<system-reminder>") else _words(user, 12)
    return f"{'Noted: ' + said if said else 'Noted, all in my observations.'} (I remember {bullets} observations.)"


_THREAD_OPEN = re.compile(r'^<thread id="([^"]*)">$')


def _thread_blocks(history: str) -> list[tuple[str, str]]:
    """A multi-thread request's history, per `<thread id>` block (empty for one thread)."""
    blocks: list[tuple[str, str]] = []
    current: list[str] | None = None
    for line in history.split("\n"):
        opened = _THREAD_OPEN.match(line)
        if opened:
            current = []
            blocks.append((opened.group(1), ""))
        elif line == "</thread>" and current is not None:
            blocks[-1] = (blocks[-1][0], "\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def _observe_threads(system: str, user: str, blocks: list[tuple[str, str]], user_words: int,
                     assistant_words: int) -> str:
    """The answer to a multi-thread request: one `<thread id>` section per thread, each with
    its own hints and title when the prompt asks for them (a title: the thread's prior one, else
    the first words the user said in it)."""
    sections = []
    for thread, history in blocks:
        bullets, last_user, _ = _bullets(history, user_words, assistant_words)
        hints = ""
        if "<thread-title>" in system:
            prior = re.search(rf"^- prior thread-title of thread {re.escape(thread)}: (.+)$", user, re.MULTILINE)
            first = next((b.split("User said: ", 1)[1] for b in bullets if "User said: " in b), "")
            title = prior.group(1) if prior else _words(first, 4).removesuffix(" ...")
            if title:
                hints += f"\n<thread-title>\n{title}\n</thread-title>"
        if "<current-task>" in system:
            topic = _words(last_user, 8)
            hints += (f'\n<current-task>\nPrimary: answer the user\'s latest message: "{topic}"\n'
                      f'</current-task>\n<suggested-response>\nContinue the discussion about '
                      f'"{topic}"\n</suggested-response>')
        sections.append(f'<thread id="{thread}">\n' + "\n".join(bullets) + hints + "\n</thread>")
    return "<observations>\n" + "\n".join(sections) + "\n</observations>"


def observe(system: str, user: str | list[Any], *, user_words: int = 40, assistant_words: int = 20,
            sees_attachments: bool = False) -> str:
    """The scripted Observer's answer to one request (`user`: text, or content parts).  With
    `sees_attachments`, one more line per attachment part received."""
    history = _section(content_text(user), "## New Message History to Observe")
    blocks = _thread_blocks(history)
    if blocks:
        return _observe_threads(system, content_text(user), blocks, user_words, assistant_words)
    bullets, last_user, time = _bullets(history, user_words, assistant_words)
    if sees_attachments:
        bullets += [f"* 🟡 ({time}) Attachment received: {seen}" for seen in received_attachments(user)]
    if not any(b.startswith("*") for b in bullets):
        bullets = ["* 🟢 (00:00) No new observable content"]
    answer = "<observations>\n" + "\n".join(bullets) + "\n</observations>"
    if "<current-task>" in system:
        topic = _words(last_user, 8)
        answer += (
            f'\n\n<current-task>\nPrimary: answer the user\'s latest message: "{topic}"\n</current-task>'
            f'\n\n<suggested-response>\nContinue the discussion about "{topic}"\n</suggested-response>'
        )
    return answer


def _bullets(history: str, user_words: int, assistant_words: int) -> tuple[list[str], str, str]:
    """The bullets for one thread's transcript, the last thing the user said, the last time."""
    bullets: list[str] = []
    last_user = ""
    time = "00:00"
    date_line: str | None = None
    for line in history.split("\n"):
        date = _DATE.match(line)
        if date:
            new_date = f"Date: {date['mon']} {int(date['day'])}, {date['year']}"
            if new_date != date_line:
                bullets.append(new_date)
                date_line = new_date
            continue
        match = _LINE.match(line)
        if not match:
            continue
        if match["time"]:
            time = _to_24h(match["time"])
        title, body = match["title"], match["body"]
        if title == "User":
            bullets.append(f"* 🔴 ({time}) User said: {_words(body, user_words)}")
            last_user = body
        elif title == "Assistant":
            bullets.append(f"* 🟡 ({time}) Assistant replied: {_words(body, assistant_words)}")
        elif title in ("Signal", ""):  # a temporal-gap marker, as 1.31.0 or §7.2 renders it
            bullets.append(f"* 🟢 ({time}) Signal: {body}")
    return bullets, last_user, time


def reflect(system: str, user: str | list[Any]) -> str:
    """The scripted Reflector's answer: every bullet shortened by the requested level."""
    user = content_text(user)
    level = next((lvl for heading, lvl in _LEVEL_HEADINGS if heading in user), 0)
    limit = _REFLECTION_WORDS[level]
    source = _section(user, "## OBSERVATIONS TO REFLECT ON", until_rule=True)
    out: list[str] = []
    last_date: str | None = None
    for line in source.split("\n"):
        stripped = line.strip()
        if not stripped or stripped.startswith("--- message boundary"):
            continue
        if stripped.startswith("<thread") or stripped.startswith("</thread"):
            out.append(stripped)
            last_date = None
            continue
        if stripped.startswith("Date:"):
            if stripped != last_date:
                out.append(stripped)
                last_date = stripped
            continue
        bullet = _BULLET.match(line)
        if bullet:
            text = bullet["text"].removeprefix("User said: ").removeprefix("Assistant replied: ")
            out.append(bullet["prefix"] + _words(text, limit))
        else:
            out.append(_words(line, limit))
    if level == 4:
        bullets = [i for i, line in enumerate(out) if _BULLET.match(line)]
        if len(bullets) > 20:
            cut = bullets[-20]
            dropped = len(bullets) - 20
            out = [f"* 🔴 (00:00) {dropped} earlier observations condensed"] + [
                line for i, line in enumerate(out) if i >= cut or not _BULLET.match(line)
            ]
    answer = "<observations>\n" + "\n".join(out) + "\n</observations>"
    if "<suggested-response>" in system:
        answer += "\n\n<suggested-response>\nContinue the conversation naturally\n</suggested-response>"
    return answer


def reset_failures() -> None:
    """Forget how many times each request has failed (tests call this between cases)."""
    with _calls_lock:
        _calls.clear()


def _kinds(value: Any) -> list[str]:
    kinds = [str(k) for k in value] if isinstance(value, (list, tuple)) else [str(value)]
    for kind in kinds:
        if kind not in FAILURES:
            raise ValueError(f"failWith={kind!r} is unknown; use one of {list(FAILURES)}")
    if not kinds:
        raise ValueError("failWith is an empty list; name at least one of " f"{list(FAILURES)}")
    return kinds


def _rate(value: Any) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"failRate={value!r} is not a number; use e.g. failRate = 0.3") from None
    if not 0 <= rate <= 1:
        raise ValueError(f"failRate={value!r} must be between 0 and 1")
    return rate


def _only(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"failOnly={value!r} must map kinds to a text, e.g. {{malformed = 'FRAGILE'}}")
    for kind in value:
        _kinds(kind)
    return {str(k): str(v) for k, v in value.items()}


def _wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Content parts stay as they are (hashed as JSON); a string is the string, as before.
    return [{"role": str(m.get("role")),
             "content": c if isinstance(c := m.get("content", ""), (list, tuple)) else str(c)}
            for m in messages]


def _draws(model: str, messages: list[dict[str, Any]], seed: Any) -> tuple[float, int]:
    """Two numbers drawn from the request itself: a fraction in [0, 1) and an index."""
    digest = hashlib.sha256(orjson.dumps(
        {"model": model, "messages": _wire(messages), "seed": seed},
        option=orjson.OPT_SORT_KEYS, default=str)).digest()
    return int.from_bytes(digest[:8], "big") / 2**64, int.from_bytes(digest[8:16], "big")


def planned_failure(model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> str | None:
    """The kind of failure a request draws from its settings (`failWith`, `failRate`,
    `failOnly`, `failModel`, `failSeed`), or None; no call is counted (`failTimes` is not
    applied).  `messages` as litellm gets them (dicts with `role` and `content`)."""
    kind = params.get("failWith")
    if kind is None:
        return None
    kinds = _kinds(kind)
    rate = params.get("failRate")
    rate = None if rate is None else _rate(rate)
    only = _only(params.get("failOnly"))
    target = params.get("failModel")
    if target is not None and str(target) not in (model, model.split("/", 1)[-1]):
        return None
    if rate is None and len(kinds) == 1 and not only:
        return kinds[0]  # the plain `failWith`: every request, no hash needed
    fraction, index = _draws(model, messages, params.get("failSeed"))
    if rate is not None and fraction >= rate:
        return None
    if only:
        text = "\n".join(content_text(m["content"]) for m in _wire(messages))
        kinds = [k for k in kinds if k not in only or only[k] in text]
        if not kinds:
            return None
    return kinds[index % len(kinds)]


def _latency(params: dict[str, Any]) -> float:
    """Seconds a call takes (`latencyMs`), 0 by default."""
    return max(0.0, float(params.get("latencyMs", 0) or 0)) / 1000


def failure_for(model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> str | None:
    """The failure this call injects, or None when it answers normally: the request's planned
    kind (`planned_failure`) for its first `failTimes` calls."""
    kind = planned_failure(model, messages, params)
    if kind is None:
        return None
    times = params.get("failTimes")
    if times is None and params.get("failRate") is not None:
        times = 1
    key = hashlib.sha256(orjson.dumps(
        {"model": model, "messages": _wire(messages),
         "fail": {k: params.get(k) for k in _FAIL_KEYS}},
        option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()
    with _calls_lock:
        seen = _calls.get(key, 0)
        _calls[key] = seen + 1
    return kind if times is None or seen < int(times) else None


_MALFORMED = "I read the conversation. Nothing stood out to me, so I have no notes to add this time."


def _degenerate() -> str:
    block = [f"* 🔴 (09:0{i}) User said: the same thing again and again, part {i}" for i in range(3)]
    return "<observations>\n" + "\n".join(block * 20) + "\n</observations>"


def _raise(litellm: ModuleType, kind: str, model: str, retry_after_ms: Any = None) -> None:
    message = f"scripted failure ({kind}) injected by failWith"
    common = {"message": message, "model": model, "llm_provider": "scripted"}
    if kind == "timeout":
        raise litellm.Timeout(message=f"{message}: request timed out", model=model, llm_provider="scripted")
    if kind == "429":
        headers = None if retry_after_ms is None else {"retry-after-ms": str(retry_after_ms)}
        raise litellm.RateLimitError(**common, headers=headers)
    if kind == "500":
        raise litellm.InternalServerError(**common)
    if kind == "503":
        raise litellm.ServiceUnavailableError(**common)
    if kind == "connection":
        raise litellm.APIConnectionError(**common)
    if kind == "401":
        raise litellm.AuthenticationError(**common)
    if kind == "400":
        raise litellm.BadRequestError(**common)


def register() -> None:
    """Add the `scripted` provider to litellm (idempotent)."""
    import litellm
    from litellm import ModelResponse
    from litellm.exceptions import BadRequestError
    from litellm.llms.custom_llm import CustomLLM

    class ScriptedProvider(CustomLLM):
        def _failure(self, model: str, messages: list[dict[str, Any]], optional_params: dict[str, Any]) -> str | None:
            try:
                return failure_for(f"scripted/{model.split('/', 1)[-1]}", messages, optional_params)
            except ValueError as exc:
                raise BadRequestError(message=str(exc), model=model, llm_provider="scripted") from None

        def _answer(self, model: str, messages: list[dict[str, Any]], optional_params: dict[str, Any],
                    failure: str | None) -> ModelResponse:
            system = "\n".join(content_text(m.get("content", "")) for m in messages if m.get("role") == "system")
            user_parts = [part for m in messages if m.get("role") == "user" for part in _parts(m.get("content"))]
            user = content_text(user_parts)
            name = model.split("/", 1)[-1]
            if failure is not None:
                _raise(litellm, failure, f"scripted/{name}", optional_params.get("retryAfterMs"))
            structured = structured_answer(user, optional_params.get("response_format"))
            if failure == "malformed":
                text = _MALFORMED
            elif failure == "degenerate":
                text = _degenerate()
            elif structured is not None:  # an extractor's follow-up, to either model
                text = structured
            elif name.startswith("observer"):
                text = observe(
                    system, user_parts,
                    user_words=int(optional_params.get("userWords", 40)),
                    assistant_words=int(optional_params.get("assistantWords", 20)),
                    sees_attachments=takes_attachments(name) is True,
                ) + inline_sections(system, user)
            elif name.startswith("reflector"):
                text = reflect(system, user) + inline_sections(system, user)
            elif name == "assistant":
                said = [m.get("content", "") for m in messages if m.get("role") == "user"]
                text = assist(system, content_text(said[-1] if said else ""))
            else:
                raise BadRequestError(
                    message=f"scripted provider has no model {name!r} (use observer, reflector or assistant)",
                    model=model, llm_provider="scripted",
                )
            return litellm.ModelResponse(
                model=f"scripted/{name}",
                choices=[{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": text}}],
                usage={"prompt_tokens": len(user.split()), "completion_tokens": len(text.split()),
                       "total_tokens": len(user.split()) + len(text.split())},
            )

        def completion(self, model: str, messages: list[Any], *args: Any,
                       optional_params: dict[str, Any] | None = None, **kwargs: Any) -> ModelResponse:
            params = optional_params or kwargs.get("optional_params") or {}
            failure = self._failure(model, messages, params)
            if failure == "hang":
                time.sleep(HANG_SECONDS)
            time.sleep(_latency(params))
            return self._answer(model, messages, params, failure)

        async def acompletion(self, model: str, messages: list[Any], *args: Any,
                              optional_params: dict[str, Any] | None = None, **kwargs: Any) -> ModelResponse:
            params = optional_params or kwargs.get("optional_params") or {}
            failure = self._failure(model, messages, params)
            if failure == "hang":
                await asyncio.sleep(HANG_SECONDS)  # without blocking the worker's event loop
            await asyncio.sleep(_latency(params))
            return self._answer(model, messages, params, failure)

    if not any(p.get("provider") == "scripted" for p in litellm.custom_provider_map):
        litellm.custom_provider_map = [
            *litellm.custom_provider_map,
            {"provider": "scripted", "custom_handler": ScriptedProvider()},
        ]
        litellm.utils.custom_llm_setup()  # type: ignore[no-untyped-call]  # litellm leaves it unannotated
