"""JSON Schema (draft 2020-12) files for every wire type, generated from the pydantic models.

Producers and consumers in other languages validate against these files instead of reading
Python: the records of every topic, and `data-part.json`, a frame of the HTTP feed.  `om schema
export` writes them to `schemas/json/` (committed) and `--check` fails when the committed copy
no longer matches the models, so the two cannot drift apart silently.

The schemas are pydantic's *validation* schemas: they describe what our decoders accept, which is
the contract a producer must meet (and what we write always meets it, since every record we
write is decoded by the same models).  Two adjustments make them stricter than pydantic's raw
output and closer to the wire: `type` is required wherever it tells records apart (except on a
message, which `decode_input` assumes when `type` is missing), and the per-property titles pydantic
derives from names ("Threadid") are dropped as noise.  Every property has a `description`: the
docstring under its field (`use_attribute_docstrings`), unwrapped to one line per paragraph.

Output is deterministic (sorted keys, two-space indent, trailing newline), so a fresh export of
unchanged models is byte-identical to the committed files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pydantic import TypeAdapter

from .base import SCHEMA_VERSION
from .control import Control
from .dead_letters import DeadLetter
from .events import Event
from .jobs import ModelJob, ModelResult
from .messages import Message
from .parts import DataPart, part_type

__all__ = ["DEFAULT_DIR", "INDEX", "ExportResult", "build_schemas", "export_schemas", "render_schemas", "schema_id"]

#: Where the committed schema files live.
DEFAULT_DIR = Path(__file__).resolve().parent / "json"
#: The file that lists the others.
INDEX = "index.json"
_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Models on which `type` may be left out by producers (see the module docstring).
_TYPE_OPTIONAL = frozenset({"Message"})


@dataclass(frozen=True)
class _WireType:
    name: str  # file stem and title
    annotation: Any
    topic: str | None  # the topic suffix after `<ns>.`; None for what travels over HTTP only
    description: str | None = None  # for unions; models bring their docstring
    route: str | None = None  # the HTTP route of what is no topic's record
    covers: tuple[str, ...] = ()  # the `type` values, when the model's `type` is a pattern

    @property
    def types(self) -> list[str]:
        """The wire `type` values this schema covers."""
        if self.covers:
            return list(self.covers)
        members = get_args(get_args(self.annotation)[0]) if not isinstance(self.annotation, type) else ()
        classes = members or (self.annotation,)
        return [cls.model_fields["type"].default for cls in classes]


def _catalogue() -> list[_WireType]:
    controls = get_args(get_args(Control)[0])
    events = get_args(get_args(Event)[0])
    return [
        _WireType("message", Message, "log"),
        _WireType("control", Control, "log",
                  "Any agent-loop marker or command of `<ns>.log`, told apart by `type`."),
        *(_WireType(cls.model_fields["type"].default, cls, "log") for cls in controls),
        _WireType("model-job", ModelJob, "jobs"),
        _WireType("model-result", ModelResult, "log"),
        _WireType("event", Event, "events", "Any record of `<ns>.events`, told apart by `type`."),
        *(_WireType(cls.model_fields["type"].default, cls, "events") for cls in events),
        _WireType("dead-letter", DeadLetter, "dlq"),
        _WireType("data-part", DataPart, None, route="GET /threads/{threadId}/events, GET /events",
                  covers=tuple(part_type(cls.model_fields["type"].default) for cls in events)),
    ]


def schema_id(name: str) -> str:
    """The `$id` of a schema file: stable per wire-format version, not a fetchable address."""
    return f"urn:omstream:schema:v{SCHEMA_VERSION}:{name}"


def _unwrap(text: str) -> str:
    """A field docstring as one line per paragraph: its line breaks are source layout only."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in text.split("\n\n"))


def _tidy(node: Any) -> None:
    """Require discriminating `type`s and drop per-property titles, everywhere in `node`."""
    if isinstance(node, dict):
        properties = node.get("properties")
        if isinstance(properties, dict):
            for prop in properties.values():
                if isinstance(prop, dict):
                    prop.pop("title", None)
                    if isinstance(prop.get("description"), str):
                        prop["description"] = _unwrap(prop["description"])
            kind = properties.get("type")
            if isinstance(kind, dict) and ("const" in kind or "pattern" in kind) \
                    and node.get("title") not in _TYPE_OPTIONAL:
                required = node.setdefault("required", [])
                if "type" not in required:
                    required.insert(0, "type")
        for value in node.values():
            _tidy(value)
    elif isinstance(node, list):
        for value in node:
            _tidy(value)


def _schema(wire: _WireType) -> dict[str, Any]:
    schema = TypeAdapter(wire.annotation).json_schema(by_alias=True, mode="validation")
    _tidy(schema)
    head: dict[str, Any] = {"$schema": _DIALECT, "$id": schema_id(wire.name), "title": wire.name}
    if wire.description:
        schema["description"] = wire.description
    schema.pop("title", None)
    return {**head, **schema}


def build_schemas() -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema, for every wire type, plus the index listing them."""
    catalogue = _catalogue()
    files = {f"{wire.name}.json": _schema(wire) for wire in catalogue}
    files[INDEX] = {
        "$comment": "Generated by `om schema export` from the pydantic models in schemas/; do not edit.",
        "schemaVersion": SCHEMA_VERSION,
        "schemas": [
            {"file": f"{wire.name}.json", "id": schema_id(wire.name), "title": wire.name,
             **({"topic": f"<ns>.{wire.topic}"} if wire.topic else {"route": wire.route}), "types": wire.types}
            for wire in catalogue
        ],
    }
    return files


def _render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render_schemas() -> dict[str, str]:
    """File name -> the exact text `export_schemas` writes."""
    return {name: _render(schema) for name, schema in build_schemas().items()}


@dataclass
class ExportResult:
    """What an export changed (or, with `check`, would change) in the output directory."""

    out: Path
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def stale(self) -> bool:
        return bool(self.added or self.changed or self.removed)


def _listed(out: Path) -> Iterable[str]:
    """Files the existing index names: the only ones an export may delete."""
    try:
        index = json.loads((out / INDEX).read_text(encoding="utf-8"))
        return [entry["file"] for entry in index.get("schemas", []) if isinstance(entry.get("file"), str)]
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return []


def export_schemas(out: Path | None = None, *, check: bool = False) -> ExportResult:
    """Write every schema file into `out` (default `DEFAULT_DIR`); with `check`, only compare.

    Files a previous export listed in its index and that no longer exist as wire types are
    removed; other files in the directory are never touched.
    """
    out = out or DEFAULT_DIR
    rendered = render_schemas()
    result = ExportResult(out)
    for name in sorted(set(_listed(out)) - set(rendered)):
        if (out / name).exists() and Path(name).name == name:
            result.removed.append(name)
    for name, text in sorted(rendered.items()):
        path = out / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        bucket = result.unchanged if current == text else (result.added if current is None else result.changed)
        bucket.append(name)
    if not check:
        out.mkdir(parents=True, exist_ok=True)
        for name in result.added + result.changed:
            (out / name).write_text(rendered[name], encoding="utf-8", newline="\n")
        for name in result.removed:
            (out / name).unlink()
    return result
