"""Code named from a file: `"package.module:function"` references, and schemas given as data.

Lifecycle hooks and extractor callbacks are *references*. They are only checked for shape at
load (importing user code while validating a file would make `om config check` run arbitrary
code and fail on a machine without the app's packages); the process that calls them imports them
with `load_reference`.  A schema is a JSON Schema object or a `"module:PydanticModel"` reference.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

__all__ = ["Reference", "SchemaOption", "code_name", "load_reference"]

_REFERENCE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


def _reference(value: str) -> str:
    if not _REFERENCE.match(value.strip()):
        raise ValueError(f"{value!r} is not a reference to Python code; write it as "
                         "'package.module:function' (module path, a colon, then the name)")
    return value.strip()


#: `"package.module:attribute"`: checked for shape at load, imported only by `load_reference`.
Reference = Annotated[str, AfterValidator(_reference)]


def load_reference(reference: str) -> Any:
    """Import `"package.module:attr.sub"` and return the object; ValueError says what is missing."""
    module_name, _, attribute = _reference(reference).partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} for {reference!r} ({exc}); "
                         "check the module is installed and on PYTHONPATH") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{module_name!r} has no {attribute!r} (from {reference!r}); "
                             "check the name after the colon")
        target = getattr(target, part)
    return target


def _json_schema(value: Any) -> Any:
    if value is None or isinstance(value, str) or callable(value):
        return value  # a reference, a pydantic class, or a function of the runtime context
    if not isinstance(value, Mapping):
        raise ValueError(f"{value!r} is not a schema; give a JSON Schema object such as "
                         "{type = 'object', properties = {...}} or a 'module:PydanticModel' reference")
    kind = value.get("type")
    names = {"object", "array", "string", "number", "integer", "boolean", "null"}
    if kind is not None and not set([kind] if isinstance(kind, str) else kind) <= names:
        raise ValueError(f"JSON Schema type {kind!r} is unknown; use one of {sorted(names)}")
    return value


#: A `schema` option: a JSON Schema object, a `"module:PydanticModel"` reference, or (from Python)
#: the class or a function itself.
SchemaOption = Annotated[dict[str, Any] | Reference | Callable[..., Any] | None, BeforeValidator(_json_schema)]


def code_name(value: Any) -> Any:
    """Code given from Python, named by its import path, so the options still have a digest."""
    return f"{value.__module__}:{value.__qualname__}" if callable(value) else value
