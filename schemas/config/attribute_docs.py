"""The docstrings under a class's fields, read from its source with `ast`.

pydantic does this itself for the option models (`use_attribute_docstrings`); `Settings`, the
`[omstream]` table, is a dataclass, and the same convention keeps its descriptions where its
defaults are: a string right under a field is that field's description.  Reading them here,
instead of asking for `field(metadata=...)` on every field, leaves the dataclass as plain as it
was and gives both halves of the configuration one way of being documented.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

__all__ = ["attribute_docstrings"]


def _class_docs(cls: type) -> dict[str, str]:
    """The field docstrings written in `cls`'s own body; {} when its source cannot be read."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source)
    body = next((node.body for node in tree.body if isinstance(node, ast.ClassDef)), [])
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def attribute_docstrings(cls: type) -> dict[str, str]:
    """Field name → the docstring under it, for `cls` and its bases (a subclass's text wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is not object:
            docs.update(_class_docs(klass))
    return docs
