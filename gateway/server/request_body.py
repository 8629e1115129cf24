"""Reading a JSON request body into the typed request, with errors that name the field."""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from gateway.errors import BadRequest

T = TypeVar("T")
_json = msgspec.json.Decoder()
_PATH = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object; 413 past the size limit (raised by aiohttp), 400 otherwise."""
    try:
        raw = await request.read()
    except web.RequestPayloadError as exc:
        # a body the client compressed (Content-Encoding) or chunked wrongly; aiohttp's
        # message ends with the reason ("Can not decode content-encoding: gzip")
        reason = str(exc).strip().splitlines()[-1].strip()
        raise BadRequest(f"The request body could not be read: {reason}") from None
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
