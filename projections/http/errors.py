"""Every error of the HTTP read side as JSON: `{"error": "<short code>", "detail": "<text>"}`.

The codes are one closed set for every route (`ERROR_CODES`, each with its status and meaning;
the OpenAPI document's `Error` schema lists them from here).  Handlers raise
`api_error(status, code, detail)`; the middleware gives any other HTTP error (aiohttp's own 404,
405 and 413, a handler's plain-text one) the same shape with the code of its status, and turns
an exception nobody expected into a 500 whose detail is a sentence, never a traceback (that goes
to the server's log, with the path but not the query, which may carry a token).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import orjson
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

__all__ = ["ERROR_CODES", "AccessLog", "ErrorCode", "api_error", "json_errors"]

log = logging.getLogger("omstream.web")

JSON = "application/json"

ErrorCode = Literal["bad-parameter", "unauthorized", "forbidden", "unknown-thread", "unknown-version",
                    "unknown-route", "not-found", "method-not-allowed", "too-large", "internal", "unavailable"]
#: Every code an error body can carry: its status and what it means (the OpenAPI document's text).
ERROR_CODES: dict[ErrorCode, tuple[int, str]] = {
    "bad-parameter": (400, "A path segment, query parameter, header or body the route cannot read (a `wait` "
                           "that is no number, an `after` that is no position, an unknown event type, a recall "
                           "parameter out of range); `detail` names it and says what is expected."),
    "unauthorized": (401, "The server has tokens and the request shows none, or one it does not know "
                          "(the answer carries `WWW-Authenticate: Bearer`)."),
    "forbidden": (403, "The token is known but not granted this thread's resource, or the route reads every "
                       "resource and the token is not granted `*`."),
    "unknown-thread": (404, "The projection knows no such thread (after waiting up to `wait` seconds for "
                            "`after`, when given)."),
    "unknown-version": (404, "The namespace has no memory version of that name (`?version=`)."),
    "unknown-route": (404, "No route has this path."),
    "not-found": (404, "The route exists but the thing it names does not (a dashboard file)."),
    "method-not-allowed": (405, "The path exists but not for this method; `detail` lists the allowed ones."),
    "too-large": (413, "The request body is larger than the server accepts."),
    "internal": (500, "An error in the server; its log has the details (the body never carries a traceback)."),
    "unavailable": (503, "The server could not reach the Kafka broker to answer (a `?version=` it had not opened "
                         "yet); try again (the answer carries `Retry-After`)."),
}
#: The code of an HTTP error that did not come with one, by status (others: `_code_of`).
CODES: dict[int, ErrorCode] = {400: "bad-parameter", 401: "unauthorized", 403: "forbidden", 404: "not-found",
                               405: "method-not-allowed", 413: "too-large", 500: "internal"}

#: aiohttp's exception class of each error status.
_CLASSES: dict[int, type[web.HTTPException]] = {
    cls.status_code: cls for cls in vars(web).values()
    if isinstance(cls, type) and issubclass(cls, web.HTTPError) and cls.status_code >= 400
    and cls.status_code != 405}  # 405's constructor takes the methods; the router raises it

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _body(code: str, detail: str) -> str:
    return orjson.dumps({"error": code, "detail": detail}).decode()


def _code_of(status: int) -> ErrorCode:
    """A status without a code of its own still gets one of the set: the client's fault or ours."""
    return CODES.get(status, "internal" if status >= 500 else "bad-parameter")


def api_error(status: int, code: ErrorCode, detail: str, headers: dict[str, str] | None = None) -> web.HTTPException:
    """The exception to raise for an error with its code (`unknown-thread`, `bad-parameter`, ...)."""
    return _CLASSES[status](text=_body(code, detail), content_type=JSON, headers=headers)


def _as_json(request: web.Request, exc: web.HTTPException) -> web.Response:
    route_missing = request.match_info.http_exception is not None
    if exc.status == 404 and route_missing:
        code, detail = "unknown-route", f"no route {request.method} {request.path}"
    elif exc.status == 405 and route_missing:
        allowed = ", ".join(sorted(getattr(exc, "allowed_methods", ()) or ()))
        code, detail = "method-not-allowed", f"{request.method} is not allowed on {request.path}; allowed: {allowed}"
    else:
        code = _code_of(exc.status)
        text = exc.text or exc.reason or ""
        detail = text.split(": ", 1)[1] if text.startswith(f"{exc.status}: ") else text
    headers = {k: v for k, v in exc.headers.items() if k.lower() not in ("content-type", "content-length")}
    return web.Response(text=_body(code, detail), status=exc.status, content_type=JSON, headers=headers)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == JSON:
            raise
        return _as_json(request, exc)
    except asyncio.CancelledError:
        raise
    except Exception:
        if request.writer is not None and request.writer.output_size > 0:
            raise  # a stream already under way: aiohttp can only close it
        log.exception("unexpected error on %s %s", request.method, request.path)
        raise api_error(500, "internal", "unexpected error in the server; its log has the details") from None


class AccessLog(AbstractAccessLogger):
    """aiohttp's access log line, with an `access_token` in the query masked."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        url: Any = request.rel_url
        if "access_token" in url.query:
            url = url.with_query({k: ("***" if k == "access_token" else v) for k, v in url.query.items()})
        self.logger.info('%s "%s %s" %s %s %.3fs', request.remote, request.method, url,
                         response.status, response.body_length, time)
