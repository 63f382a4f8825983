"""Every answer the integration tests read from `om serve` is checked against the committed
OpenAPI document (schemas/openapi.json) with openapi-core: status documented for the operation,
content type, headers and body schema.  `support.Server.get` and the other tests' HTTP helpers
call `check_answer`, so a route that drifts from its document fails the test that reads it."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from jsonschema import validate
from openapi_core import OpenAPI
from openapi_core.datatypes import RequestParameters
from openapi_core.validation.response.exceptions import MissingData
from werkzeug.datastructures import Headers, ImmutableMultiDict

from omstream.projections.http.status import committed_text

#: How many answers were checked in this process (a test may print it as evidence).
CHECKED: dict[str, int] = {}


@functools.cache
def _document() -> OpenAPI:
    return OpenAPI.from_dict(json.loads(committed_text()))


@functools.cache
def _error_schema() -> dict[str, Any]:
    return dict(json.loads(committed_text())["components"]["schemas"]["Error"])


def _operation(method: str, path: str) -> dict[str, Any] | None:
    """The document's operation for `method` `path` (`path` an instance of its template)."""
    def pattern(template: str) -> str:
        return "".join("[^/]+" if piece.startswith("{") else re.escape(piece)
                       for piece in re.split(r"(\{[^}]+\})", template))

    for template, item in json.loads(committed_text())["paths"].items():
        if re.fullmatch(pattern(template), path) and method.lower() in item:
            return dict(item[method.lower()])
    return None


@dataclass
class _Request:
    host_url: str
    path: str
    method: str
    parameters: RequestParameters
    body: bytes | None = None
    content_type: str = "application/json"


@dataclass
class _Response:
    status_code: int
    data: bytes | None
    content_type: str
    headers: Headers = field(default_factory=Headers)


def check_answer(method: str, url: str, status: int, headers: Mapping[str, str], body: bytes | None,
                 params: Mapping[str, Any] | None = None, *, headers_sent: Mapping[str, str] | None = None) -> None:
    """Raise (openapi-core's error, with what was asked) unless the answer (`status`, its
    `headers` and `body`) is one the document gives for `method` `url` `params`.  `body` None:
    a stream still open (a live feed), whose status, content type and headers are checked."""
    parts = urlsplit(url)
    request = _Request(f"{parts.scheme}://{parts.netloc}", parts.path, method.lower(),
                       RequestParameters(query=ImmutableMultiDict({k: str(v) for k, v in (params or {}).items()}),
                                         header=Headers(list((headers_sent or {}).items()))))
    answered = Headers(list(headers.items()))  # names in any case (a HAR file has them lower-case)
    kind = answered.get("Content-Type", "")
    response = _Response(status, body, kind.lower(), answered)
    try:
        operation = _operation(method, parts.path)
        if operation is not None and body is None:
            documented = operation["responses"].get(str(status), {}).get("content", {})
            assert kind.split(";")[0].strip().lower() in documented, (status, kind, sorted(documented))
            errors = [e for e in _document().iter_response_errors(request, response) if not isinstance(e, MissingData)]
            if errors:
                raise errors[0]
        elif operation is not None:
            _document().validate_response(request, response)
        else:  # no route: the router's 404 (or 405), in the one error shape every route answers with
            assert status in (404, 405) and kind.startswith("application/json"), (status, kind)
            validate(json.loads(body), _error_schema())
    except Exception as exc:
        raise AssertionError(f"{method} {url} {dict(params or {})} -> {status} {kind}: the answer is not the "
                             f"OpenAPI document's: {exc!r} {getattr(exc, '__cause__', None)!r}; "
                             f"body {(body or b'')[:300]!r}") from exc
    CHECKED[f"{method.upper()} {status}"] = CHECKED.get(f"{method.upper()} {status}", 0) + 1
