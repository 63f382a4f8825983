"""Code named from a file: `"package.module:function"` references, and schemas given as data.

Lifecycle hooks and extractor callbacks are *references*. They are only checked for shape at
load (importing user code while validating a file would make `om config check` run arbitrary
code and fail on a machine without the app's packages); the process that calls them imports them
with `load_reference`.  A schema is a JSON Schema object or a `"module:PydanticModel"` reference.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

__all__ = ["Reference", "SchemaOption", "async_callable_problem", "code_name", "load_reference"]

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


def async_callable_problem(value: Any) -> str | None:
    """Why an extractor function cannot be `value`, when it is an `async` function (or an
    object whose `__call__` is one); None for anything else.  Extractor functions run inside the
    fold, which awaits nothing: a coroutine would take the place of the value."""
    target = value.__call__ if callable(value) and not inspect.isroutine(value) else value
    if inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
        return ("is an async function; extractor functions run inside the fold, which awaits "
                "nothing (a replay must decide as the live run did): make it a plain `def`, and "
                "do I/O in a lifecycle hook (hooks.onObservationEnd), which is awaited")
    return None


def code_name(value: Any) -> Any:
    """Code given from Python, named by its import path, so the options still have a digest (a
    callable object by its class's)."""
    if not callable(value):
        return value
    return f"{value.__module__}:{getattr(value, '__qualname__', type(value).__qualname__)}"
