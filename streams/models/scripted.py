"""Scripted Observer and Reflector: deterministic local models, for tests, demos and parity runs.

They are real litellm models (`scripted/observer`, `scripted/reflector`) served by a
`litellm.CustomLLM` provider, so every call takes the same path as a hosted model.  Their
answers are computed from the prompt by fixed rules (`shared/scenarios/README.md`): the observer
turns each transcript line into one bullet, the reflector shortens bullets by compression level.
They are named "scripted" on purpose: nothing here pretends to be a language model.

Word limits are settable per call through model settings (`userWords`, `assistantWords`,
`reflectionWords`), e.g. `observation.modelSettings = {userWords = 10}`.
"""

from __future__ import annotations

import re

__all__ = ["reflect", "observe", "register"]

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


def observe(system: str, user: str, *, user_words: int = 40, assistant_words: int = 20) -> str:
    """The scripted Observer's answer to one request."""
    history = _section(user, "## New Message History to Observe")
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
        elif title == "":
            bullets.append(f"* 🟢 ({time}) Signal: {body}")
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


def reflect(system: str, user: str) -> str:
    """The scripted Reflector's answer: every bullet shortened by the requested level."""
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


def register() -> None:
    """Add the `scripted` provider to litellm (idempotent)."""
    import litellm
    from litellm import CustomLLM, ModelResponse

    class ScriptedProvider(CustomLLM):
        def _answer(self, model: str, messages: list, optional_params: dict) -> ModelResponse:
            system = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
            user = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
            name = model.split("/", 1)[-1]
            if name.startswith("observer"):
                text = observe(
                    system, user,
                    user_words=int(optional_params.get("userWords", 40)),
                    assistant_words=int(optional_params.get("assistantWords", 20)),
                )
            elif name.startswith("reflector"):
                text = reflect(system, user)
            else:
                raise litellm.BadRequestError(
                    message=f"scripted provider has no model {name!r} (use observer or reflector)",
                    model=model, llm_provider="scripted",
                )
            return litellm.ModelResponse(
                model=f"scripted/{name}",
                choices=[{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": text}}],
                usage={"prompt_tokens": len(user.split()), "completion_tokens": len(text.split()),
                       "total_tokens": len(user.split()) + len(text.split())},
            )

        def completion(self, model, messages, *args, optional_params=None, **kwargs):
            return self._answer(model, messages, optional_params or kwargs.get("optional_params") or {})

        async def acompletion(self, model, messages, *args, optional_params=None, **kwargs):
            return self._answer(model, messages, optional_params or kwargs.get("optional_params") or {})

    if not any(p.get("provider") == "scripted" for p in litellm.custom_provider_map):
        litellm.custom_provider_map = [
            *litellm.custom_provider_map,
            {"provider": "scripted", "custom_handler": ScriptedProvider()},
        ]
        litellm.utils.custom_llm_setup()
