"""The console's routes (docs/console.md): the page and its files under /ui/, its own API
under /ui/api/ (sign-in, the overview) and the admin API's handlers behind a console session.

Every answer carries the console's headers (a strict Content-Security-Policy among them),
errors included. The admin handlers are the admin API's own: a request that passed the
session check (and, to change anything, the CSRF check) is marked `CONSOLE_SIGNED_IN`, which
`authorize_admin` takes for the master key. /admin/* itself still takes the bearer key only.
"""

from __future__ import annotations

import hashlib
import logging
import time
import urllib.parse
from collections.abc import Awaitable
from collections.abc import Callable
from importlib import resources
from typing import Any

import msgspec
from aiohttp import web

from gateway.console.overview import OverviewSampler
from gateway.console.sessions import COOKIE
from gateway.console.sessions import Session
from gateway.console.sessions import SignInThrottle
from gateway.console.sessions import close_session
from gateway.console.sessions import csrf_matches
from gateway.console.sessions import find_session
from gateway.console.sessions import master_matches
from gateway.console.sessions import open_session
from gateway.errors import AuthenticationFailed
from gateway.errors import BadRequest
from gateway.errors import GatewayError
from gateway.errors import NotFound
from gateway.errors import PermissionDenied
from gateway.errors import RateLimited
from gateway.server.admin_config import admin_config
from gateway.server.admin_health import admin_health
from gateway.server.admin_keys import create_key
from gateway.server.admin_keys import get_key
from gateway.server.admin_keys import list_keys
from gateway.server.admin_keys import revoke_key
from gateway.server.admin_keys import spend
from gateway.server.admin_requests import get_request
from gateway.server.admin_requests import list_requests
from gateway.server.auth import CONSOLE_SIGNED_IN
from gateway.server.errors import error_response
from gateway.server.state import REQUEST_ID
from gateway.server.state import STATE

log = logging.getLogger("gateway.console")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_sign_in_decoder = msgspec.json.Decoder(dict[str, Any])


class Asset(msgspec.Struct, frozen=True):
    body: bytes
    content_type: str
    etag: str


def load_assets() -> dict[str, Asset]:
    """The page's files, read once from the package: only these names are ever served."""
    assets: dict[str, Asset] = {}
    for item in resources.files("gateway.console").joinpath("static").iterdir():
        suffix = "." + item.name.rpartition(".")[2]
        if not item.is_file() or suffix not in CONTENT_TYPES:
            continue
        body = item.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        assets[item.name] = Asset(body, CONTENT_TYPES[suffix], etag)
    return assets


class Console:
    """One process's console: its files, the sign-in throttle and the overview's sampler."""

    def __init__(self, sampler: OverviewSampler) -> None:
        self.assets = load_assets()
        self.throttle = SignInThrottle()
        self.sampler = sampler


CONSOLE = web.AppKey("console", Console)


def _headers(response: web.StreamResponse, cache: str = "no-store") -> web.StreamResponse:
    response.headers.update(HEADERS)
    response.headers.setdefault("Cache-Control", cache)
    return response


def console_route(handler: Handler) -> Handler:
    """The console's headers on the answer, and on an error's too."""

    async def serve(request: web.Request) -> web.StreamResponse:
        try:
            response = await handler(request)
        except GatewayError as err:
            response = error_response(err, request.get(REQUEST_ID))
        return _headers(response)

    return serve


def _master_key(request: web.Request) -> str:
    master = request.app[STATE].config.auth.master_key
    if not master:
        raise PermissionDenied(
            "The console is disabled: set auth.master_key to sign in", code="console_disabled"
        )
    return master.reveal()  # compared as hashes (sessions.py), never shown


def _same_origin(request: web.Request) -> bool:
    """A browser's Origin, when sent, must name this host (an ingress may end TLS, so the
    scheme is not compared)."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return urllib.parse.urlsplit(origin).netloc.lower() == request.host.lower()


def _csrf_failed(message: str) -> PermissionDenied:
    return PermissionDenied(message, code="csrf_failed")


async def signed_in(request: web.Request) -> Session:
    """The request's live session; a state-changing request must also pass the CSRF check."""
    master = _master_key(request)
    session = await find_session(request.app[STATE].kv, request.cookies.get(COOKIE), master)
    if session is None:
        raise AuthenticationFailed("Sign in to the console", code="not_signed_in")
    if request.method in WRITES:
        if not _same_origin(request):
            raise _csrf_failed("Cross-origin request refused")
        if not csrf_matches(session, request.headers.get("X-CSRF-Token")):
            raise _csrf_failed("Missing or wrong X-CSRF-Token")
    return session


def as_master(handler: Handler) -> Handler:
    """An admin API handler, for a signed-in console."""

    async def serve(request: web.Request) -> web.StreamResponse:
        await signed_in(request)
        request[CONSOLE_SIGNED_IN] = True
        return await handler(request)

    return console_route(serve)


def _is_https(request: web.Request) -> bool:
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.secure or forwarded == "https"


def _session_answer(session: Session) -> dict[str, Any]:
    return {"signed_in": True, "csrf": session.csrf, "expires_at": session.expires_at}


async def session_info(request: web.Request) -> web.StreamResponse:
    return web.json_response(_session_answer(await signed_in(request)))


async def sign_in(request: web.Request) -> web.StreamResponse:
    master = _master_key(request)
    if not _same_origin(request):
        raise _csrf_failed("Cross-origin sign-in refused")
    console, address = request.app[CONSOLE], request.remote or "unknown"
    wait = console.throttle.retry_after_s(address, time.monotonic())
    if wait > 0:
        err = RateLimited(
            "Too many failed sign-ins from this address: try again later",
            code="too_many_sign_ins",
        )
        err.headers["Retry-After"] = str(int(wait) + 1)
        raise err
    try:
        body = _sign_in_decoder.decode(await request.read())
    except msgspec.DecodeError:
        raise BadRequest("The body must be a JSON object", code="invalid_body") from None
    presented = body.get("master_key")
    if not isinstance(presented, str) or not presented:
        raise BadRequest("master_key is required", param="master_key", code="invalid_body")
    if not master_matches(presented, master):
        console.throttle.failed(address, time.monotonic())
        log.warning("console: failed sign-in from %s", address)
        raise AuthenticationFailed("That is not the master key", code="invalid_master_key")
    console.throttle.succeeded(address)
    ttl = request.app[STATE].config.console.session_ttl_s
    token, session = await open_session(request.app[STATE].kv, master, ttl)
    log.info("console: signed in from %s", address)
    response = web.json_response(_session_answer(session))
    response.set_cookie(
        COOKIE,
        token,
        max_age=int(ttl),
        path="/ui",
        httponly=True,
        samesite="Strict",
        secure=_is_https(request),
    )
    return response


async def sign_out(request: web.Request) -> web.StreamResponse:
    await signed_in(request)
    await close_session(request.app[STATE].kv, request.cookies[COOKIE])
    log.info("console: signed out from %s", request.remote or "unknown")
    response = web.json_response({"signed_in": False})
    response.del_cookie(COOKIE, path="/ui", httponly=True, samesite="Strict")
    return response


async def overview(request: web.Request) -> web.StreamResponse:
    await signed_in(request)
    return web.json_response(request.app[CONSOLE].sampler.report())


async def page(request: web.Request) -> web.StreamResponse:
    return _asset_response(request, "index.html", "no-store")


async def asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name == "index.html" or name not in request.app[CONSOLE].assets:
        raise NotFound(f"No console file {name}", code="not_found")
    return _asset_response(request, name, "no-cache")


def _asset_response(request: web.Request, name: str, cache: str) -> web.StreamResponse:
    found = request.app[CONSOLE].assets[name]
    headers = {"Content-Type": found.content_type, "ETag": found.etag, "Cache-Control": cache}
    if cache != "no-store" and request.headers.get("If-None-Match") == found.etag:
        return web.Response(status=304, headers=headers)
    return web.Response(body=found.body, headers=headers)


async def to_page(request: web.Request) -> web.StreamResponse:
    raise web.HTTPPermanentRedirect("/ui/")


def add_console_routes(app: web.Application, sampler: OverviewSampler) -> None:
    """The console's routes, and its sampler running while the app serves."""
    app[CONSOLE] = Console(sampler)
    route = app.router
    route.add_get("/ui", to_page)
    route.add_get("/ui/", console_route(page))
    route.add_get("/ui/assets/{name}", console_route(asset))
    route.add_get("/ui/api/session", console_route(session_info))
    route.add_post("/ui/api/session", console_route(sign_in))
    route.add_delete("/ui/api/session", console_route(sign_out))
    route.add_get("/ui/api/overview", console_route(overview))
    route.add_get("/ui/api/health", as_master(admin_health))
    route.add_get("/ui/api/keys", as_master(list_keys))
    route.add_post("/ui/api/keys", as_master(create_key))
    route.add_get("/ui/api/keys/{key_id}", as_master(get_key))
    route.add_delete("/ui/api/keys/{key_id}", as_master(revoke_key))
    route.add_get("/ui/api/spend", as_master(spend))
    route.add_get("/ui/api/requests", as_master(list_requests))
    route.add_get("/ui/api/requests/{request_id}", as_master(get_request))
    route.add_get("/ui/api/config", as_master(admin_config))
    app.cleanup_ctx.append(_sampling)


async def _sampling(app: web.Application) -> Any:
    sampler = app[CONSOLE].sampler
    await sampler.sample()  # the first snapshot: the first point comes one interval later
    sampler.start()
    yield
    await sampler.stop()
