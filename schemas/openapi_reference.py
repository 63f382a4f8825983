"""The HTTP reference, as Markdown, generated from the OpenAPI 3.1 document of `om serve`.

`schemas/openapi.json` is generated from the code that serves the routes (and checked against
its router); `render_http_reference` turns it into the manual's reference/http.md at build time
(docs/hooks/generate.py), so the page lists exactly the routes, parameters, bodies, answers and
error codes the document has.  Pure: a parsed document in, text out.  Only what the document says
is printed; a part it leaves out (no parameters, no request body) is left out of the page too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["METHODS", "error_codes", "operation_anchor", "operations", "render_http_reference", "schema_label"]

#: The HTTP methods of an OpenAPI path item, in the order they are listed.
METHODS = ("get", "put", "post", "patch", "delete", "head", "options", "trace")
_COMPONENT = "#/components/schemas/"
_CODE_LINE = re.compile(r"^- `(?P<code>[^`]+)` \((?P<status>\d{3})\): (?P<text>.*)$", re.MULTILINE)

Doc = Mapping[str, Any]


# --- small pieces ---------------------------------------------------------------------------------
def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def operation_anchor(method: str, path: str) -> str:
    """`get`, `/threads/{threadId}` → `get-threads-threadid`."""
    return f"{method.lower()}-{_slug(path) or 'root'}"


def schema_anchor(name: str) -> str:
    return f"schema-{_slug(name)}"


def cell(text: str) -> str:
    """Text for a table cell: one line, pipes escaped, paragraphs as line breaks."""
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    return "<br><br>".join(paragraphs).replace("|", "\\|")


def _code(value: Any) -> str:
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def operations(document: Doc) -> list[tuple[str, str, Doc]]:
    """Every (method, path, operation) of the document, paths in document order."""
    found = []
    for path, item in (document.get("paths") or {}).items():
        for method in METHODS:
            if isinstance(item, Mapping) and isinstance(item.get(method), Mapping):
                found.append((method, path, item[method]))
    return found


# --- JSON Schema as words -------------------------------------------------------------------------
def _ref_label(ref: str) -> str:
    name = ref.rsplit("/", 1)[-1]
    if ref.startswith(_COMPONENT) and "/" not in ref[len(_COMPONENT):]:
        return f"[{name}](#{schema_anchor(name)})"
    return f"`{name}`"


def _limits(schema: Doc) -> list[str]:
    words = []
    for key, word in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
        if key in schema:
            words.append(f"{word} {schema[key]}")
    if "minLength" in schema:
        words.append(f"at least {schema['minLength']} characters" if schema["minLength"] != 1 else "not empty")
    if "maxLength" in schema:
        words.append(f"at most {schema['maxLength']} characters")
    if "pattern" in schema:
        words.append(f"matching `{schema['pattern']}`")
    if "format" in schema:
        words.append(f"format `{schema['format']}`")
    return words


def _type_words(schema: Doc) -> str:
    kinds = schema.get("type")
    if isinstance(kinds, list):
        return " or ".join(_type_words({**schema, "type": kind}) for kind in kinds)
    if kinds == "array":
        items = schema.get("items")
        return "list of " + (schema_label(items) if isinstance(items, Mapping) else "any value")
    return str(kinds) if kinds else "any value"


def schema_label(schema: Any) -> str:
    """A schema in a few words: `string, not empty`, `"low" or "high"`, a link to a component."""
    if not isinstance(schema, Mapping):
        return "any value"
    if "$ref" in schema:
        return _ref_label(str(schema["$ref"]))
    if "const" in schema:
        return _code(schema["const"])
    if "enum" in schema:
        return " or ".join(_code(value) for value in schema["enum"])
    for key, joiner in (("anyOf", " or "), ("oneOf", " or "), ("allOf", " and ")):
        if isinstance(schema.get(key), list):
            return joiner.join(dict.fromkeys(schema_label(part) for part in schema[key]))
    return ", ".join([_type_words(schema), *_limits(schema)])


def _default(schema: Any) -> str:
    return f" Default {_code(schema['default'])}." if isinstance(schema, Mapping) and "default" in schema else ""


# --- one operation --------------------------------------------------------------------------------
def _parameters(operation: Doc) -> list[str]:
    params = [p for p in operation.get("parameters") or [] if isinstance(p, Mapping)]
    if not params:
        return []
    lines = ["**Parameters**", "", "| name | in | type | required | description |", "|---|---|---|---|---|"]
    for p in params:
        schema = p.get("schema", {})
        text = (str(p.get("description", "")) + _default(schema)).strip()
        lines.append(f"| `{p.get('name')}` | {p.get('in')} | {cell(schema_label(schema))} | "
                     f"{'yes' if p.get('required') else 'no'} | {cell(text)} |")
    return [*lines, ""]


def _content(content: Any) -> str:
    if not isinstance(content, Mapping) or not content:
        return ""
    return "<br>".join(f"`{media}`" + (f": {schema_label(body['schema'])}" if isinstance(body, Mapping)
                                        and "schema" in body else "")
                       for media, body in content.items())


def _request_body(operation: Doc) -> list[str]:
    body = operation.get("requestBody")
    if not isinstance(body, Mapping):
        return []
    needed = "required" if body.get("required") else "optional"
    lines = [f"**Request body** ({needed}): {_content(body.get('content'))}", ""]
    if body.get("description"):
        lines += [str(body["description"]), ""]
    return lines


def _headers(response: Doc) -> str:
    headers = response.get("headers")
    if not isinstance(headers, Mapping):
        return ""
    return "<br>".join(f"`{name}`" + (f": {h['description']}" if isinstance(h, Mapping) and h.get("description")
                                      else "") for name, h in headers.items())


def _responses(operation: Doc) -> list[str]:
    responses = operation.get("responses")
    if not isinstance(responses, Mapping) or not responses:
        return []
    lines = ["**Responses**", "", "| status | description | body | headers |", "|---|---|---|---|"]
    for status, response in responses.items():
        response = response if isinstance(response, Mapping) else {}
        lines.append(f"| {status} | {cell(str(response.get('description', '')))} | "
                     f"{cell(_content(response.get('content')))} | {cell(_headers(response))} |")
    return [*lines, ""]


def _security(operation: Doc) -> list[str]:
    if operation.get("security") == []:
        return ["Public: no token is needed.", ""]
    if isinstance(operation.get("security"), list):
        names = sorted({name for requirement in operation["security"] for name in requirement})
        return [f"Authentication: {', '.join(f'`{n}`' for n in names) or 'none'}.", ""]
    return []


def _operation(method: str, path: str, operation: Doc) -> list[str]:
    lines = [f"### `{method.upper()} {path}` {{ #{operation_anchor(method, path)} }}", ""]
    if operation.get("summary"):
        lines += [f"*{operation['summary']}*", ""]
    if operation.get("description"):
        lines += [str(operation["description"]), ""]
    if operation.get("operationId"):
        lines += [f"Operation id: `{operation['operationId']}`.", ""]
    return lines + _security(operation) + _parameters(operation) + _request_body(operation) + _responses(operation)


# --- the document ---------------------------------------------------------------------------------
def _intro(document: Doc) -> list[str]:
    info = document.get("info") or {}
    lines = ["# HTTP reference", "",
             "<!-- Generated by docs/hooks/generate.py from schemas/openapi.json "
             "(omstream.schemas.openapi_reference); do not edit. -->", ""]
    title = info.get("title", "")
    version = info.get("version")
    lines += [f"**{title}**" + (f", version {version}" if version else "")
              + f" (OpenAPI {document.get('openapi', '3.1')}; the document itself: `GET /openapi.json`).", ""]
    if info.get("description"):
        lines += [str(info["description"]), ""]
    return lines


def _authentication(document: Doc) -> list[str]:
    schemes = (document.get("components") or {}).get("securitySchemes") or {}
    if not schemes:
        return []
    lines = ["## Authentication { #authentication }", "", "| scheme | kind | description |", "|---|---|---|"]
    for name, scheme in schemes.items():
        kind = scheme.get("scheme") or scheme.get("type", "")
        where = f" (`{scheme['name']}` in the {scheme['in']})" if scheme.get("name") and scheme.get("in") else ""
        lines.append(f"| `{name}` | {kind}{where} | {cell(str(scheme.get('description', '')))} |")
    if any(requirement == {} for requirement in document.get("security") or []):
        lines += ["", "A route with no requirement of its own takes any of these, or none where the "
                  "server has no tokens."]
    return [*lines, ""]


def _summary(document: Doc) -> list[str]:
    lines = ["## Routes { #routes }", "", "| method | path | summary |", "|---|---|---|"]
    lines += [f"| {method.upper()} | [`{path}`](#{operation_anchor(method, path)}) | "
              f"{cell(str(op.get('summary', '')))} |" for method, path, op in operations(document)]
    return [*lines, ""]


def error_codes(document: Doc) -> list[tuple[str, str, str]]:
    """(code, status, meaning) of the error body's `error` property: the codes its enum lists,
    with the status and text its description gives as `- \\`code\\` (status): text` lines."""
    found: list[tuple[str, str, str]] = []
    for schema in ((document.get("components") or {}).get("schemas") or {}).values():
        prop = (schema.get("properties") or {}).get("error") if isinstance(schema, Mapping) else None
        if isinstance(prop, Mapping) and isinstance(prop.get("enum"), list):
            told = {m["code"]: (m["status"], m["text"]) for m in _CODE_LINE.finditer(
                f"{prop.get('description', '')}\n{schema.get('description', '')}")}
            found += [(str(code), *told.get(str(code), ("", ""))) for code in prop["enum"]]
    return list(dict.fromkeys(found))


def _errors(document: Doc) -> list[str]:
    codes = error_codes(document)
    if not codes:
        return []
    lines = ["## Error codes { #error-codes }", "",
             "Every error answer carries one of these in its `error` field:", "",
             "| code | status | meaning |", "|---|---|---|"]
    lines += [f"| `{code}` | {status} | {cell(text)} |" for code, status, text in codes]
    return [*lines, ""]


def _properties(schema: Doc) -> list[str]:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return []
    required = set(schema.get("required") or [])
    lines = ["| property | type | required | description |", "|---|---|---|---|"]
    for name, prop in properties.items():
        text = (str(prop.get("description", "")) if isinstance(prop, Mapping) else "") + _default(prop)
        lines.append(f"| `{name}` | {cell(schema_label(prop))} | {'yes' if name in required else 'no'} | "
                     f"{cell(text.strip())} |")
    return [*lines, ""]


def _schemas(document: Doc) -> list[str]:
    schemas = (document.get("components") or {}).get("schemas") or {}
    if not schemas:
        return []
    lines = ["## Schemas { #schemas }", ""]
    for name, schema in schemas.items():
        lines += [f"### `{name}` {{ #{schema_anchor(name)} }}", ""]
        if not isinstance(schema, Mapping):
            continue
        if schema.get("description"):
            lines += [str(schema["description"]), ""]
        table = _properties(schema)
        lines += table or [f"A value of: {schema_label({k: v for k, v in schema.items() if k != 'description'})}.",
                           ""]
    return lines


def _sections(parts: Iterable[list[str]]) -> str:
    return "\n".join(line for part in parts for line in part).rstrip("\n") + "\n"


def render_http_reference(document: Doc) -> str:
    """The HTTP reference page of an OpenAPI 3.x document (parsed JSON)."""
    ops = [["## Operations { #operations }", ""]]
    ops += [_operation(method, path, op) for method, path, op in operations(document)]
    return _sections([_intro(document), _authentication(document), _summary(document), *ops,
                      _errors(document), _schemas(document)])


def missing_document_page(where: str) -> str:
    """The page when there is no document to render."""
    return (f"# HTTP reference\n\nThe OpenAPI document `{where}` is missing, so this page has nothing to show; "
            "`python -m omstream.projections.openapi` writes it.\n")
