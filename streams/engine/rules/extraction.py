"""Extractors (spec §9): values an observation or reflection cycle pulls out besides its text.

An extractor without a schema is *inline*: the Observer (or Reflector) writes it as a
`<slug>...</slug>` section after `</observations>`, in the same answer.  One with a schema is
*structured*: once the main answer is in, the fold asks for a follow-up model job (kind
`extract`) whose JSON answer is validated against the schema.  `mode = "hook"` only calls
`onExtracted` with the raw observations.  Then each extractor's `onExtracted` hook may replace
its value; a hook that raises fails that extractor alone.  What is left is stored in the
thread's OM metadata at the extractor's key path and carried by the cycle's end event
(`extractedValues`, `extractionFailures`).

The built-ins `thread-title` (`observation.threadTitle`) and `working-memory`
(`observation.manageWorkingMemory`: the whole updated working-memory document, markdown
inline or a JSON object as a structured value; it replaces the thread's document and is not
stored in the OM metadata) go through the same pipeline.  The
continuation hints (`current-task`, `suggested-response`) keep their own parser and mirror as
before: their sections and state fields predate this module and the recorded scenarios pin
their bytes.

Everything here is pure and deterministic given the configuration: instructions and schemas
given as functions are called with the cycle's runtime context, and `onExtracted` hooks run
inside the fold, so they must be deterministic functions of their arguments for a replay to
decide as the live run did.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel

from omstream.schemas.config.references import async_callable_problem

__all__ = [
    "Extraction",
    "Spec",
    "THREAD_TITLE",
    "WORKING_MEMORY",
    "import_references",
    "inline_instructions",
    "inline_reminder",
    "inline_values",
    "prior_values",
    "read_structured",
    "retry_reason",
    "settle",
    "working_memory_problem",
    "working_memory_schema",
    "specs",
    "store",
    "structured_request",
    "title_change",
    "without_sections",
]

THREAD_TITLE = "thread-title"
WORKING_MEMORY = "working-memory"
_THREAD_TITLE_INSTRUCTIONS = (
    "A short title for this conversation, 3 to 8 words, in the user's language. Keep the prior "
    "title unless the topic has changed substantially.")
Source = Literal["observer", "reflector"]


@dataclass(frozen=True)
class Spec:
    """One extractor, resolved for one cycle (its instructions and schema already computed)."""

    slug: str
    instructions: str = ""
    schema: Mapping[str, Any] | type[BaseModel] | None = None  # None: inline; a JSON Schema or a pydantic class
    include_previous: bool = True
    key_path: str | None = None              # in the thread's OM metadata; None: not stored
    hook: Callable[..., Any] | None = None
    mode: Literal["inline", "structured", "hook"] = "inline"
    builtin: bool = False
    retry_empty: bool = False                # ask once more when the follow-up answers `{}`


@dataclass(frozen=True)
class Extraction:
    """What one cycle extracted: values by slug, failures by slug."""

    values: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)


@functools.lru_cache(maxsize=256)
def _load(reference: str) -> Any:
    from omstream.schemas.config import load_reference

    return load_reference(reference)


def _resolve(value: Any, context: Mapping[str, Any]) -> Any:
    """A `module:attr` reference is imported (once); a function is called with the context."""
    if isinstance(value, str) and _is_reference(value):
        value = _load(value)
    if callable(value) and not isinstance(value, type):
        value = value(dict(context))
    if isinstance(value, str) and _is_reference(value):  # a function may name a schema too
        value = _load(value)
    return value


_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def _is_reference(text: str) -> bool:
    # Instructions are prose: a string with no space shaped `package.module:attr` is a reference.
    return bool(_REFERENCE.match(text))


def specs(om: Any, source: Source, context: Mapping[str, Any]) -> tuple[Spec, ...]:
    """The extractors of one cycle in run order: the built-in title, the user's, then working
    memory (`ResolvedObservation.extractors`' order)."""
    options = om.observation if source == "observer" else om.reflection
    out: list[Spec] = []
    if source == "observer" and om.observation.thread_title:
        out.append(Spec(THREAD_TITLE, _THREAD_TITLE_INSTRUCTIONS, builtin=True))
    for e in options.extract:
        hook = _load(e.on_extracted) if isinstance(e.on_extracted, str) else e.on_extracted
        if e.kind == "hook":
            out.append(Spec(e.slug, mode="hook", hook=hook, key_path=None, include_previous=False))
            continue
        schema = _resolve(e.schema_, context) if e.schema_ is not None else None
        out.append(Spec(
            e.slug, str(_resolve(e.instructions or "", context)).strip(), schema=schema,
            include_previous=e.include_previous_extraction, key_path=e.key_path, hook=hook,
            mode="structured" if schema is not None else "inline",
            retry_empty=e.retry_structured_extraction_on_empty_object))
    if source == "observer" and om.observation.manage_working_memory:
        out.append(_working_memory(om.working_memory, context.get("workingMemory")))
    return tuple(out)


def import_references(om: Any) -> None:
    """Import every extractor reference (instructions, schema, `onExtracted`) now, so a
    missing module, or a function the fold cannot call, stops the worker (or the simulator, or
    the replay) at start rather than failing a cycle hours later."""
    for path, options in (("observation", om.observation), ("reflection", om.reflection)):
        for i, e in enumerate(options.extract):
            for name, value in (("instructions", e.instructions), ("schema", e.schema_),
                                ("onExtracted", e.on_extracted)):
                if isinstance(value, str) and _is_reference(value):
                    try:
                        target = _load(value)
                    except ValueError as exc:
                        raise ValueError(f"{path}.extract[{i}].{name}: {exc}") from None
                    if name == "onExtracted" and not callable(target):
                        raise ValueError(f"{path}.extract[{i}].onExtracted: {value!r} is not a function")
                    problem = async_callable_problem(target)
                    if problem:
                        raise ValueError(f"{path}.extract[{i}].{name}: {value!r} {problem}")


def _working_memory(config: Any, current: Any) -> Spec:
    """The working-memory extractor for the thread's document as it is now (spec §9.4)."""
    schema = _resolve(config.schema_, {}) if config.schema_ is not None else None
    if schema is None:
        return Spec(WORKING_MEMORY, (
            "The user's working memory: durable facts about the user, their goals and their work "
            "worth keeping across conversations. Write the whole updated document in the "
            "template's format, keeping what still holds and adding what is new; leave the "
            f"section out when nothing changed.\n\nTemplate:\n{config.template}\n\nCurrent "
            f"working memory:\n{current or '(empty)'}"), include_previous=False, builtin=True)
    shown = orjson.dumps(current).decode() if current is not None else "null"
    return Spec(WORKING_MEMORY, (
        "The user's working memory: the whole updated JSON object (durable facts about the user, "
        "their goals and their work), or null when nothing changed. Current working memory: "
        f"{shown}"), schema={"anyOf": [_json_schema(schema), {"type": "null"}]},
        include_previous=False, mode="structured", builtin=True, retry_empty=True)


def working_memory_schema(config: Any) -> dict[str, Any] | None:
    """`workingMemory.schema` as a JSON Schema (a pydantic class's, for a reference); None without."""
    return None if config.schema_ is None else _json_schema(_resolve(config.schema_, {}))


def working_memory_problem(config: Any, value: Any) -> str | None:
    """Why `value` cannot be the working-memory document the agent wrote, or None: markdown text
    without `schema`, else a JSON object the schema accepts."""
    schema = working_memory_schema(config)
    if schema is None:
        return None if isinstance(value, str) else "the document is markdown text (no workingMemory.schema is set)"
    if not isinstance(value, dict):
        return "the document is a JSON object (workingMemory.schema is set)"
    import jsonschema

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return f"the document does not fit workingMemory.schema: {exc.message}"
    return None


# --- prompts ---------------------------------------------------------------------------------
def inline_instructions(extractors: tuple[Spec, ...]) -> str:
    """The system prompt's section asking for the inline extractors' tagged sections."""
    inline = [s for s in extractors if s.mode == "inline"]
    if not inline:
        return ""
    blocks = "\n".join(f"<{s.slug}>\n{s.instructions}\n</{s.slug}>" for s in inline)
    return ("=== EXTRA SECTIONS ===\n\nAfter </observations>, also write each of these sections, "
            "the tags on their own lines, each holding what its instructions ask for. Leave a "
            "section out when there is nothing for it.\n\n" + blocks)


def inline_reminder(extractors: tuple[Spec, ...]) -> str:
    """The end of the task, naming the sections again: a small model follows the last thing
    it reads and otherwise forgets sections asked for only in the system prompt."""
    tags = [f"<{s.slug}>" for s in extractors if s.mode == "inline"]
    if not tags:
        return ""
    return (f"\n\nAfter </observations>, write the {' and '.join(tags)} "
            f"section{'s' if len(tags) > 1 else ''} the instructions describe.")


def _show(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def prior_values(extractors: tuple[Spec, ...], metadata: Mapping[str, Any],
                 title: str | None = None) -> str:
    """`<slug>\\nvalue\\n</slug>` blocks of the values stored so far, for the next run to keep
    or update (only extractors with `includePreviousExtraction`)."""
    blocks = []
    for s in extractors:
        if s.mode == "hook" or not s.include_previous:
            continue
        value = title if s.slug == THREAD_TITLE else get_path(metadata, s.key_path)
        if not _empty(value):
            blocks.append(f"<{s.slug}>\n{_show(value)}\n</{s.slug}>")
    return "\n".join(blocks)


# --- inline values ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _section(slug: str) -> re.Pattern[str]:
    return re.compile(rf"<{re.escape(slug)}>([\s\S]*?)</{re.escape(slug)}>")


def without_sections(raw: str, extractors: tuple[Spec, ...]) -> str:
    """The answer without the inline extractors' sections, so none of them becomes an
    observation."""
    for s in extractors:
        if s.mode == "inline":
            raw = _section(s.slug).sub("", raw)
    return raw


def inline_values(raw: str, extractors: tuple[Spec, ...]) -> dict[str, Any]:
    """Each inline extractor's section text (the last one, when the model wrote it twice)."""
    values: dict[str, Any] = {}
    for s in extractors:
        if s.mode != "inline":
            continue
        found = _section(s.slug).findall(raw)
        if found and found[-1].strip():
            values[s.slug] = found[-1].strip()
    return values


# --- structured follow-up (spec §9.3) ----------------------------------------------------------
def _json_schema(schema: Mapping[str, Any] | type[BaseModel]) -> dict[str, Any]:
    return schema.model_json_schema() if isinstance(schema, type) else dict(schema)


def structured_request(extractors: tuple[Spec, ...], *, source: Source, observations: str,
                       transcript: str, metadata: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(system, user, settings) of the follow-up call: the cycle's output (and, for an
    observation, what it observed), the extractors and their prior values; the settings ask
    for a JSON object of the extractors' schemas (`response_format`)."""
    structured = [s for s in extractors if s.mode == "structured"]
    made = "observations" if source == "observer" else "reflection"
    system = (f"You extract structured data from the {made} you just made. Return only the JSON "
              "object: one property per extractor, holding what its instructions ask for; leave "
              "out a property you have nothing for; keep a prior value that still applies.")
    parts = []
    if transcript:
        parts.append(f"## Conversation\n\n{transcript}")
    parts.append(f"## Your {made.capitalize()}\n\n{observations}")
    parts.append("## Extractors\n\n" + "\n".join(f"- {s.slug}: {s.instructions}" for s in structured))
    prior = prior_values(tuple(structured), metadata)
    if prior:
        parts.append(f"## Prior Extracted Values\n\n{prior}")
    schema = {"type": "object", "additionalProperties": False,
              "properties": {s.slug: _json_schema(s.schema) for s in structured if s.schema is not None}}
    settings = {"response_format": {"type": "json_schema", "json_schema": {
        "name": "extracted_values", "schema": schema}}}
    return system, "\n\n---\n\n".join(parts), settings


_FENCE = re.compile(r"^\s*```(?:json)?\s*([\s\S]*?)\s*```\s*$")
#: Added to a follow-up asked again (spec §9.3: once, when the answer was no JSON object).
JSON_ONLY = "\n\nAnswer with the JSON object alone: no prose, no code fence."


def _json_object(text: str) -> tuple[Any, str | None]:
    """The answer's JSON object (a ```json fence allowed), or why there is none."""
    fenced = _FENCE.match(text)
    try:
        data = orjson.loads(fenced.group(1) if fenced else text)
    except orjson.JSONDecodeError as exc:
        return None, f"the structured answer is not JSON: {exc}"
    if not isinstance(data, dict):
        return None, "the structured answer is not a JSON object"
    return data, None


def retry_reason(output: str | None, extractors: tuple[Spec, ...]) -> str | None:
    """Why a follow-up that answered is asked once more (spec §9.3), or None: its answer is no
    JSON object, or it is `{}` and an extractor asks for a retry on an empty object."""
    data, problem = _json_object(output or "")
    if problem is not None:
        return problem
    if not data and any(s.retry_empty for s in extractors if s.mode == "structured"):
        return "the structured answer is an empty object"
    return None


def _validate(spec: Spec, value: Any) -> Any:
    """The value checked against the extractor's schema (a pydantic class gives its JSON dump)."""
    if isinstance(spec.schema, type):
        return spec.schema.model_validate(value).model_dump(mode="json")
    import jsonschema

    jsonschema.validate(value, spec.schema)
    return value


def read_structured(output: str | None, error: str | None,
                    extractors: tuple[Spec, ...]) -> Extraction:
    """The follow-up's values, each validated; a call that failed or answered no JSON object
    fails every structured extractor, a value that does not fit fails its extractor alone."""
    structured = [s for s in extractors if s.mode == "structured"]
    if not structured:
        return Extraction()
    data: Any = None
    problem = error
    if problem is None:
        data, problem = _json_object(output or "")
    if problem is not None:
        return Extraction(failures={s.slug: problem[:500] for s in structured})
    values, failures = {}, {}
    for s in structured:
        if _empty(data.get(s.slug)):
            continue
        try:
            values[s.slug] = _validate(s, data[s.slug])
        except Exception as exc:  # noqa: BLE001 - pydantic or jsonschema: the value does not fit
            failures[s.slug] = f"does not match its schema: {_first_line(exc)}"
    return Extraction(values, failures)


# --- hooks, persistence ---------------------------------------------------------------------------
def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().split("\n")[0] or type(exc).__name__)[:500]


def settle(extractors: tuple[Spec, ...], inline: Mapping[str, Any], structured: Extraction, *,
           context: Mapping[str, Any], metadata: Mapping[str, Any], raw_observations: str) -> Extraction:
    """Inline values, overridden by structured ones, then each extractor's `onExtracted`:
    a returned value replaces (and is checked against the schema), a raise drops the value
    and records the failure; empty values are dropped everywhere (spec §9.2)."""
    values = {**inline, **structured.values}
    failures = dict(structured.failures)
    for s in extractors:
        if s.hook is None or s.builtin or (s.mode != "hook" and s.slug not in values):
            continue
        current = raw_observations if s.mode == "hook" else values[s.slug]
        try:
            replaced = s.hook({**context, "extractor": s.slug, "current": current,
                               "previous": get_path(metadata, s.key_path),
                               "rawObservations": raw_observations})
            if s.mode != "hook" and replaced is not None:
                values[s.slug] = _validate(s, replaced) if s.mode == "structured" else replaced
        except Exception as exc:  # noqa: BLE001 - a user hook: its failure is its extractor's alone
            values.pop(s.slug, None)
            failures[s.slug] = f"onExtracted failed: {type(exc).__name__}: {_first_line(exc)}"
    values = {slug: v for slug, v in values.items() if not _empty(v)}
    return Extraction(values, failures)


def get_path(tree: Mapping[str, Any], path: str | None) -> Any:
    """The value at a dot-separated path of the metadata, or None."""
    if path is None:
        return None
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = tree
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value


def store(metadata: Mapping[str, Any], extractors: tuple[Spec, ...],
          values: Mapping[str, Any]) -> dict[str, Any]:
    """The thread's OM metadata with each stored extractor's value set at its key path (the
    title is the thread's own field, see `title_change`); other keys are kept."""
    out = copy.deepcopy(dict(metadata))
    for s in extractors:
        if s.slug in values and s.key_path is not None and not s.builtin:
            _set_path(out, s.key_path, values[s.slug])
    return out


def title_change(values: Mapping[str, Any], current: str | None, pinned: bool) -> str | None:
    """The thread's new title, when the cycle proposed one that may replace the current one:
    at least 3 characters, different, and the title not pinned (spec §9.2)."""
    candidate = values.get(THREAD_TITLE)
    if not isinstance(candidate, str) or pinned:
        return None
    candidate = candidate.strip().split("\n")[0].strip().strip('"').strip()
    if len(candidate) < 3 or candidate == current:
        return None
    return candidate
