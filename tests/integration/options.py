"""The `[observationalMemory]` section of an integration test's configuration, built from values.

Each test names only the options it is about; the rest — the tokenx counter the recordings use
and the scripted Observer — come from here, so a change of a default is made once.  Nested
dictionaries become TOML tables (`modelSettings = {...}` and `[...modelSettings]` are the same
TOML), lists of dictionaries arrays of tables (`[[...extract]]`).
"""

from __future__ import annotations

import json
from typing import Any

DEFAULTS: dict[str, Any] = {"tokenCounter": "tokenx", "observation": {"model": "scripted/observer"}}
SCRIPTED_REFLECTOR = {"model": "scripted/reflector"}


def om_options(*, settings: dict[str, Any] | None = None, observation: dict[str, Any] | None = None,
               reflection: dict[str, Any] | None = None, **top: Any) -> str:
    """TOML for `new_env(options=...)`: `settings` are `[omstream]` keys (the section the
    namespace's configuration ends with), the rest `[observationalMemory]` options; a
    `reflection` given runs the scripted Reflector unless it names a model."""
    section = {**DEFAULTS, **top, "observation": {**DEFAULTS["observation"], **(observation or {})}}
    if reflection is not None:
        section["reflection"] = {**SCRIPTED_REFLECTOR, **reflection}
    head = "".join(f"{key} = {_value(value)}\n" for key, value in (settings or {}).items())
    return head + "\n" + _table("observationalMemory", section)


def _table(name: str, table: dict[str, Any]) -> str:
    scalars = {k: v for k, v in table.items() if not _is_table(v) and not _is_table_array(v)}
    lines = [f"[{name}]", *(f"{k} = {_value(v)}" for k, v in scalars.items())]
    out = "\n".join(lines) + "\n"
    for key, value in table.items():
        if _is_table(value):
            out += "\n" + _table(f"{name}.{key}", value)
        elif _is_table_array(value):
            for item in value:
                out += "\n" + _table(f"{name}.{key}", item).replace(f"[{name}.{key}]", f"[[{name}.{key}]]", 1)
    return out


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"no TOML for {value!r}")
