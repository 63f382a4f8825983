"""Who may read what from `om serve`: a token per request, checked by one middleware.

A request shows its token as `Authorization: Bearer <token>`, or as `?access_token=<token>` for
clients that cannot set a header (a browser's `EventSource`).  The middleware decides by the
route, never by per-route code, so a route added later is covered as it is added:

- a route marked `public` (`/healthz`) is open;
- a route with a `{thread_id}` (or `{threadId}`) in its path reads that thread: the token must
  be granted the thread's resource (the `resourceId` of its messages, as the projection has
  them; a thread whose messages name none is readable with `*` only);
- a route marked `filtered` (`/threads`) answers any known token and shows only what it may read
  (the handler asks `grant_of(request)`);
- any other route reads the whole namespace (`/events`, and anything not marked): `*` only.

No token, or one the table does not know: 401.  A known token without access: 403.  A token
bound to resources asking for a thread the projection does not know yet gets 404 without the
handler running (it could otherwise wait for, or follow, a thread that turns out to be
another's); `?after=` makes it wait first, up to `?wait=`, as the context route does.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from omstream.api_tokens import TokenTable, grants_from_text, merge_grants
from omstream.schemas.config import Problem
from omstream.schemas.errors import OmError
from omstream.settings import Settings, SettingsError

from .errors import Handler, api_error

__all__ = ["GRANT", "NO_THREAD", "AccessRefused", "access_middleware", "filtered", "grant_of",
           "is_loopback", "public", "token_table"]

GRANT = web.RequestKey("om_grant", object)
THREAD_KEYS = ("thread_id", "threadId")
#: What `locate` answers for a thread the projection does not know.
NO_THREAD = object()
F = TypeVar("F", bound=Callable[..., Any])


class AccessRefused(OmError):
    """`om serve` would serve every thread to the network without tokens."""


def public(handler: F) -> F:
    """Mark a route's handler as open to every client."""
    handler.om_access = "public"  # type: ignore[attr-defined]
    return handler


def filtered(handler: F) -> F:
    """Mark a namespace-wide handler that shows each token only what it may read."""
    handler.om_access = "filtered"  # type: ignore[attr-defined]
    return handler


def grant_of(request: web.Request) -> Any:
    """The request's grant (`omstream.api_tokens.Grant`); None when the server has no tokens."""
    return request.get(GRANT)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def token_table(settings: Settings) -> TokenTable | None:
    """The server's tokens (settings and file), None when there are none; `AccessRefused` on
    an address that is not loopback without tokens, `SettingsError` for a bad tokens file."""
    grants = settings.api_tokens
    if settings.api_tokens_file:
        path = Path(settings.api_tokens_file)
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise SettingsError([Problem(str(path), f"the tokens file (omstream.api_tokens_file) cannot be read "
                                                    f"({reason})")]) from None
        try:
            grants = merge_grants(grants, grants_from_text(text, unit="line"))
        except ValueError as exc:
            raise SettingsError([Problem(str(path), str(exc))]) from None
    if not grants and not is_loopback(settings.web_host):
        raise AccessRefused(
            f"omstream.web_host {settings.web_host!r} is not a loopback address and no token is set: set "
            "omstream.api_tokens / OM_API_TOKENS or omstream.api_tokens_file / OM_API_TOKENS_FILE "
            "(or serve on 127.0.0.1)")
    return TokenTable(grants) if grants else None


def _token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.query.get("access_token") or None


def access_middleware(tokens: TokenTable, locate: Callable[[web.Request, str], Awaitable[Any]]) -> Any:
    """The middleware; `locate(request, thread_id)` is the thread's resource id (None when its
    messages name none), or `NO_THREAD`."""

    @web.middleware
    async def check_access(request: web.Request, handler: Handler) -> web.StreamResponse:
        match = request.match_info
        if getattr(match.handler, "om_access", None) == "public":
            return await handler(request)
        token = _token(request)
        grant = tokens.grant(token) if token else None
        if grant is None:
            raise api_error(401, "unauthorized",
                            "unknown token" if token else
                            "send a token: 'Authorization: Bearer <token>' or '?access_token=<token>'",
                            headers={"WWW-Authenticate": 'Bearer realm="omstream"'})
        request[GRANT] = grant
        if match.http_exception is not None or grant.everything:
            return await handler(request)  # no such route (404/405), or a token for everything
        thread = next((match[k] for k in THREAD_KEYS if k in match), None)
        if thread is None:
            if getattr(match.handler, "om_access", None) == "filtered":
                return await handler(request)
            raise api_error(403, "forbidden", "this route reads every resource: it needs a token granted '*'")
        resource = await locate(request, thread)
        if resource is NO_THREAD:
            raise api_error(404, "unknown-thread", f"unknown thread {thread!r}")
        if not grant.may_read(resource):
            raise api_error(403, "forbidden", f"this token may not read thread {thread!r}")
        return await handler(request)

    return check_access
