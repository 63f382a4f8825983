"""The scripted models' extractor answers (spec §9): fixed rules, for tests and demos.

* **Inline sections.**  When the system prompt asks for extra sections (`=== EXTRA SECTIONS
  ===`, then `<slug>` blocks holding each extractor's instructions), the scripted Observer or
  Reflector appends one `<slug>` section per block: `thread-title` keeps the prior title the
  prompt shows, else takes the first six words of the first user line; any other slug the latest
  user line that shares a word of four letters or more with its instructions (else the latest
  user line), at most twenty words.
* **Structured follow-ups.**  A request with a JSON-schema `response_format` is answered with
  a JSON object built from the schema: strings take the same line as above, numbers the
  count of user lines, booleans `true`, arrays one item, objects every property, an `enum`
  its first value; `$ref`s into `$defs` are followed.

A "user line" is a transcript line `User (...): text` (or `User: text`); a request without
one (a reflection) uses the observation lines' text instead.  Nothing here is a language model.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

__all__ = ["inline_sections", "structured_answer"]

_USER_LINE = re.compile(r"^User(?: \([^)]*\))?: (?P<text>.+)$", re.MULTILINE)
_OBSERVATION = re.compile(r"^\s*\* \S+ \(\d{2}:\d{2}\) (?P<text>.+)$", re.MULTILINE)
_BLOCK = re.compile(r"<(?P<slug>[a-z][a-z0-9-]*)>\n(?P<instructions>[\s\S]*?)\n</(?P=slug)>")
_EXTRACTOR_LINE = re.compile(r"^- (?P<slug>[a-z][a-z0-9-]*): (?P<instructions>.*)$", re.MULTILINE)
_WORD = re.compile(r"[a-z]{4,}")


def _lines(user: str) -> list[str]:
    found = [m["text"].strip() for m in _USER_LINE.finditer(user)]
    return found or [m["text"].strip() for m in _OBSERVATION.finditer(user)]


def _pick(lines: list[str], instructions: str) -> str:
    wanted = set(_WORD.findall(instructions.lower()))
    chosen = next((line for line in reversed(lines) if wanted & set(_WORD.findall(line.lower()))),
                  lines[-1] if lines else "")
    return " ".join(chosen.split()[:20])


def _value(slug: str, instructions: str, lines: list[str]) -> str:
    if slug == "thread-title":
        return " ".join(lines[0].split()[:6]).rstrip(".,!?;:") if lines else ""
    return _pick(lines, instructions)


def inline_sections(system: str, user: str) -> str:
    """The `<slug>` sections the system prompt asks for, or "" when it asks for none."""
    start = system.find("=== EXTRA SECTIONS ===")
    if start < 0:
        return ""
    lines = _lines(user)
    prior = {b["slug"]: b["instructions"] for b in _BLOCK.finditer(user)}
    out = []
    for block in _BLOCK.finditer(system[start:]):
        value = (prior.get("thread-title") if block["slug"] == "thread-title" else None) or _value(
            block["slug"], block["instructions"], lines)
        if value:
            out.append(f"<{block['slug']}>\n{value}\n</{block['slug']}>")
    return "\n" + "\n".join(out) if out else ""


def _fill(schema: Any, text: str, count: int, defs: dict[str, Any]) -> Any:
    if not isinstance(schema, dict):
        return text
    if "$ref" in schema:
        return _fill(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), text, count, defs)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return _fill(options[0], text, count, defs)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object":
        return {name: _fill(sub, text, count, defs) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [_fill(schema.get("items", {}), text, count, defs)]
    if kind in ("integer", "number"):
        return count
    if kind == "boolean":
        return True
    return text


def structured_answer(user: str, response_format: Any) -> str | None:
    """The JSON answer to a structured follow-up, or None when the request is not one."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    schema = (response_format.get("json_schema") or {}).get("schema") or {}
    instructions = {m["slug"]: m["instructions"] for m in _EXTRACTOR_LINE.finditer(user)}
    lines = _lines(user)
    answer = {}
    for slug, sub in (schema.get("properties") or {}).items():
        text = _value(slug, instructions.get(slug, ""), lines)
        if text:
            answer[slug] = _fill(sub, text, len(lines), sub.get("$defs", {}) if isinstance(sub, dict) else {})
    return orjson.dumps(answer).decode()
