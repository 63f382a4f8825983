"""The configuration reference, as Markdown, generated from the code that reads the configuration.

Every option of the `observationalMemory` tree is a field of a model of this package, and its
description is the docstring under that field (`Options` sets `use_attribute_docstrings`); every
key of the `[omstream]` table is a field of the `Settings` dataclass, documented the same way
(read by `attribute_docs`).  `render_reference` turns both into the manual's
reference/configuration.md (docs/hooks/generate.py writes it at build time), so the page cannot
say something the code does not: a renamed option, a new default or a changed description is on
the page at the next build, and `undocumented` names any option without a description.

Pure: classes in, text out.  `Settings` lives outside `omstream.schemas`, so it is passed in.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, fields
from pathlib import PurePath
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from .attribute_docs import attribute_docstrings
from .options import OmConfig

__all__ = ["OptionRow", "Section", "SettingRow", "option_sections", "render_reference", "setting_rows",
           "undocumented"]

#: The file's two tables.
OPTIONS_TABLE = "observationalMemory"
RUNTIME_TABLE = "omstream"
#: Settings fields that are not keys of the `[omstream]` table.
NOT_KEYS = ("om", "config_file")
_SHORT = 48  # a longer default is printed below its table instead of in a cell
_WORDS = {bool: "boolean", int: "integer", float: "number", str: "string", Any: "any value"}
_KIND_WORDS = {"str": "string", "int": "integer", "float": "number", "Path": "path", "bool": "boolean",
               "TokenGrants": "tokens"}


@dataclass(frozen=True)
class OptionRow:
    """One option: its dotted camelCase path, type, default and description."""

    path: str
    type: str
    default: str
    description: str
    long_default: str | None = None  # the whole default, when too long for its cell


@dataclass(frozen=True)
class Section:
    """The options of one table of the tree, at `path` ("" for the tree's root)."""

    path: str
    model: type[BaseModel]
    rows: tuple[OptionRow, ...]
    same_as: str | None = None  # a model already listed at another path: its rows are there


@dataclass(frozen=True)
class SettingRow:
    """One key of the `[omstream]` table."""

    key: str
    env: str
    type: str
    default: str
    description: str


# --- types and defaults, as a user reads them -------------------------------------------------------
def anchor(path: str) -> str:
    """The page anchor of a table of options: `observation.extract[]` → `option-observation-extract-items`."""
    words = re.sub(r"[^a-z0-9]+", "-", path.replace("[]", "-items").lower()).strip("-")
    return f"option-{words}" if words else "option-root"


def _strip(annotation: Any) -> Any:
    """The type under `Annotated[...]` layers."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _members(annotation: Any) -> tuple[Any, ...]:
    """A union's members (without None), or the type alone."""
    annotation = _strip(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(m for member in get_args(annotation) if member is not type(None)
                     for m in _members(member))
    return (annotation,)


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def nested_models(annotation: Any) -> Iterator[tuple[type[BaseModel], str]]:
    """The option tables inside a field's type, each with its path suffix ("[]" for a list's items)."""
    for member in _members(annotation):
        if _is_model(member):
            yield member, ""
        elif get_origin(member) is tuple:
            yield from ((model, "[]") for model, _ in nested_models(get_args(member)[0]))


def _word(member: Any, path: str) -> str:
    if get_origin(member) is Literal:
        return " or ".join(f"`{json.dumps(value)}`" for value in get_args(member))
    if _is_model(member):
        return f"[table](#{anchor(path)})"
    if get_origin(member) is tuple:
        return "list of " + type_label(get_args(member)[0], f"{path}[]")
    if get_origin(member) is dict:
        values = get_args(member)[1]
        return "table" if values is Any else "table of " + type_label(values, path)
    if get_origin(member) is Callable or member is Callable:
        return "function (from Python)"
    return _WORDS.get(member, getattr(member, "__name__", str(member)))


def type_label(annotation: Any, path: str) -> str:
    """`int | float | Literal[False]` → "number or `false`"; a table links to its section."""
    members = list(_members(annotation))
    if int in members and float in members:
        members.remove(int)
    words = dict.fromkeys(_word(member, path) for member in members)
    return " or ".join(words)


def _value_text(value: Any) -> str:
    """A default as a user writes it: JSON/TOML words (`true`, `"thread"`, `[]`)."""
    if isinstance(value, PurePath):
        value = str(value)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    if isinstance(value, tuple):
        value = list(value)
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return str(value)


def default_cell(value: Any, required: bool = False) -> tuple[str, str | None]:
    """The default's cell, and the whole default when it is too long for one."""
    if required:
        return "required", None
    if value is None:
        return "unset", None
    if isinstance(value, BaseModel) and not value.model_fields_set:
        return "its table's defaults", None
    if isinstance(value, str) and ("\n" in value or len(value) > _SHORT):
        return "below the table", value
    return f"`{_value_text(value)}`", None


def unwrap(text: str | None) -> str:
    """A docstring as one line per paragraph: its line breaks are source layout only."""
    return "\n\n".join(" ".join(p.split()) for p in (text or "").split("\n\n") if p.strip())


# --- the observationalMemory tree -----------------------------------------------------------------
def _key(name: str, info: FieldInfo) -> str:
    return info.alias or to_camel(name)


def _row(path: str, info: FieldInfo) -> OptionRow:
    required = info.is_required()
    cell, long_default = default_cell(None if required else info.get_default(call_default_factory=True), required)
    return OptionRow(path, type_label(info.annotation, path), cell, unwrap(info.description), long_default)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def option_sections(root: type[BaseModel] = OmConfig) -> list[Section]:
    """Every table of the option tree, depth first from `root`; a model met again (the fallback
    list of `model` and of `observation.model`) is listed once and referred to after."""
    seen: dict[type[BaseModel], str] = {}
    return list(_sections(root, "", seen))


def _sections(model: type[BaseModel], path: str, seen: dict[type[BaseModel], str]) -> Iterator[Section]:
    if model in seen:
        yield Section(path, model, (), same_as=seen[model])
        return
    seen[model] = path
    rows = tuple(_row(_join(path, _key(name, info)), info) for name, info in model.model_fields.items())
    yield Section(path, model, rows)
    for name, info in model.model_fields.items():
        for child, suffix in nested_models(info.annotation):
            yield from _sections(child, _join(path, _key(name, info)) + suffix, seen)


# --- the [omstream] table -------------------------------------------------------------------------
def setting_rows(settings: type, env_prefix: str = "OM_") -> list[SettingRow]:
    """The keys of the `[omstream]` table (the fields of the `Settings` dataclass `settings`)."""
    docs = attribute_docstrings(settings)
    rows = []
    for f in fields(settings):
        if f.name in NOT_KEYS:
            continue
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        value = f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default
        cell, _ = default_cell(value)
        rows.append(SettingRow(f.name, f"{env_prefix}{f.name.upper()}", _KIND_WORDS.get(kind, kind), cell,
                               unwrap(docs.get(f.name))))
    return rows


def undocumented(settings: type | None = None, root: type[BaseModel] = OmConfig) -> list[str]:
    """The options and keys without a description: each should say what it does."""
    missing = [row.path for section in option_sections(root) for row in section.rows if not row.description]
    if settings is not None:
        missing += [f"{RUNTIME_TABLE}.{row.key}" for row in setting_rows(settings) if not row.description]
    return missing


# --- Markdown -------------------------------------------------------------------------------------
def cell(text: str) -> str:
    """Text for a table cell: paragraphs as line breaks, pipes escaped."""
    return text.replace("|", "\\|").replace("\n\n", "<br><br>").replace("\n", " ")


_INTRO = """\
# Configuration reference

<!-- Generated from the code by omstream.schemas.config.reference (docs/hooks/generate.py,
`om config reference`); do not edit. -->

One file (TOML, YAML or JSON), named by `--config FILE` or `OM_CONFIG`, holds two tables:
`[{runtime}]`, where things run, and `[{options}]`, what the memory does.  Environment variables
`{prefix}<KEY>` override the keys of `[{runtime}]`.  Options are written in camelCase (as below)
or snake_case; `[{options}]` may also be `true` (the default model) or `false` (memory off).
A mistake anywhere stops every command with one `path: problem` line per mistake;
`om config check FILE` reports them without starting anything.

This page is generated from the code that reads the configuration: the descriptions are the
docstrings of the option models (`omstream.schemas.config`) and of `omstream.settings.Settings`.
"""


def _settings_markdown(settings: type, env_prefix: str) -> list[str]:
    lines = [f"## `[{RUNTIME_TABLE}]` {{ #{RUNTIME_TABLE} }}", "",
             "| key | environment variable | type | default | description |",
             "|---|---|---|---|---|"]
    lines += [f"| `{r.key}` | `{r.env}` | {r.type} | {r.default} | {cell(r.description)} |"
              for r in setting_rows(settings, env_prefix)]
    return [*lines, ""]


def _section_markdown(section: Section) -> list[str]:
    title = f"{OPTIONS_TABLE}.{section.path}" if section.path else OPTIONS_TABLE
    lines = [f"### `{title}` {{ #{anchor(section.path)} }}", ""]
    doc = unwrap(section.model.__doc__) if section.model.__doc__ else ""
    if section.same_as is not None:
        target = f"{OPTIONS_TABLE}.{section.same_as}" if section.same_as else OPTIONS_TABLE
        return [*lines, f"The same options as [`{target}`](#{anchor(section.same_as)}).", ""]
    if doc:
        lines += [doc, ""]
    lines += ["| option | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{r.path}` | {cell(r.type)} | {r.default} | {cell(r.description)} |" for r in section.rows]
    lines.append("")
    for row in section.rows:
        if row.long_default is not None:
            lines += [f"The default of `{row.path}`:", "", "```text", row.long_default, "```", ""]
    return lines


def render_reference(settings: type | None = None, *, env_prefix: str = "OM_",
                     root: type[BaseModel] = OmConfig) -> str:
    """The configuration reference page: the `[omstream]` keys of `settings` (a `Settings`
    dataclass; left out when None) and every option of the tree under `root`."""
    lines = [_INTRO.format(runtime=RUNTIME_TABLE, options=OPTIONS_TABLE, prefix=env_prefix)]
    if settings is not None:
        lines += _settings_markdown(settings, env_prefix)
    lines += [f"## `[{OPTIONS_TABLE}]` {{ #{OPTIONS_TABLE} }}", "",
              "Paths are written from the table: `observation.messageTokens` is `messageTokens` of "
              f"`[{OPTIONS_TABLE}.observation]`; `[]` marks the entries of a list.", ""]
    for section in option_sections(root):
        lines += _section_markdown(section)
    return "\n".join(lines).rstrip("\n") + "\n"
