"""Reading a JSON request body into the typed request, with errors that name the field.

A body that has all arrived (the usual case: a request of a few KB comes in one read) is
taken from the request's stream as it is, without aiohttp's `read()` loop, which costs
several microseconds a request; either way the bytes are kept on the request (`RAW_BODY`),
and `body_bytes` is how later code gets them (`request.read()` after a body taken so would
answer b"").

A body still arriving is read within the connection's body deadline
(`server.client_body_timeout_s` from its head, kept by `GatewayRequestHandler`): past it the
client gets a 408 `request_timeout` (in its API's error shape) and the connection is closed
after that answer, so a client trickling its body holds neither a connection nor a handler
for longer than the deadline. A body that has all arrived is taken as before, with no timer.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any
from typing import TypeVar

import msgspec
from aiohttp import web

from gateway.errors import BadRequest
from gateway.errors import RequestTimeout
from gateway.server.connection import GatewayRequestHandler

log = logging.getLogger("gateway.server")
T = TypeVar("T")
RAW_BODY = web.RequestKey("raw_body", bytes)
_json = msgspec.json.Decoder()
_PATH = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object; 413 past the size limit (raised by aiohttp), 400 otherwise."""
    try:
        raw = _received_body(request)
        if raw is None:
            raw = await _read_in_time(request)
    except web.RequestPayloadError as exc:
        # a body the client compressed (Content-Encoding) or chunked wrongly; aiohttp's
        # message ends with the reason ("Can not decode content-encoding: gzip")
        reason = str(exc).strip().splitlines()[-1].strip()
        raise BadRequest(f"The request body could not be read: {reason}") from None
    request[RAW_BODY] = raw
    if not raw.strip():
        raise BadRequest("The request body is empty; expected a JSON object")
    try:
        body = _json.decode(raw)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}") from None
    except RecursionError:
        # msgspec recurses per nesting level and stops at the interpreter's limit
        raise BadRequest("The request body is not valid JSON: it is nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest(f"The request body must be a JSON object, not {type(body).__name__}")
    return body


async def body_bytes(request: web.Request) -> bytes:
    """The request's body, read once (by `read_json_object` or here)."""
    raw = request.get(RAW_BODY)
    if raw is None:
        raw = request[RAW_BODY] = await _read_in_time(request)
    return raw


async def _read_in_time(request: web.Request) -> bytes:
    """`request.read()`, within the body deadline of the connection's handler when it has one
    (a gateway served by `GatewayRunner`; not aiohttp's test server)."""
    handler = request.protocol
    if not isinstance(handler, GatewayRequestHandler) or handler.body_deadline is None:
        return await request.read()
    try:
        async with asyncio.timeout_at(handler.body_deadline):
            return await request.read()
    except TimeoutError:
        # the rest of the body, if it ever comes, is not worth reading: close after the 408
        handler.close_after_answer()
        timeout_s = handler.body_timeout_s
        log.warning(
            "closing a connection from %s: the body of %s %s did not arrive within %gs (408)",
            request.remote,
            request.method,
            request.path,
            timeout_s,
        )
        err = RequestTimeout(f"The request body did not arrive within {timeout_s:g}s of its head")
        err.headers["Connection"] = "close"
        raise err from None


def _received_body(request: web.Request) -> bytes | None:
    """The whole body when it was read before or has all arrived unread; else None (and
    `request.read()` waits for the rest, or answers the bytes it read before)."""
    raw: bytes | None = request.get(RAW_BODY)
    if raw is not None:
        return raw
    content = request.content
    if not content.is_eof() or content.at_eof():  # more to come, or nothing left unread
        return None
    raw = content.read_nowait()
    limit = request.client_max_size
    if limit and len(raw) > limit:  # what aiohttp's read() refuses (413)
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=len(raw))
    return raw


def typed(body: dict[str, Any], kind: type[T]) -> T:
    """`body` converted to `kind`; a wrong field becomes a 400 whose `param` is its path."""
    try:
        return msgspec.convert(body, kind)
    except msgspec.ValidationError as exc:
        message = str(exc)
        param = None
        at = _PATH.search(message)
        if at:
            # msgspec names a value inside a mapping `metadata[...]`: the field is the mapping
            param = at.group("path").split("[...]", 1)[0] or None
            message = message[: at.start()]
        missing = _MISSING.match(message)
        if missing:
            prefix = f"{param}." if param else ""
            param = prefix + missing.group("field")
            message = f"Missing required parameter: '{param}'"
        else:
            what = "value" if message.startswith("Invalid enum value") else "type"
            message = f"Invalid {what} for '{param or 'body'}': {message[:1].lower()}{message[1:]}"
        raise BadRequest(message, param=param, code="invalid_request") from None
