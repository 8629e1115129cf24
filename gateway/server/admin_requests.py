"""The request log's admin routes (master key only; docs/request-log.md):

- `GET /admin/requests?key=&model=&status=&request_id=&since=&until=&limit=&cursor=`: newest
  first, `{"data": [...], "next_cursor": ...}`; `status` an exact code or a class (`4xx`);
  `since`/`until` ISO 8601 or epoch seconds (`since` inclusive, `until` exclusive); `limit`
  1 to 1000 (default 100); `cursor` the `next_cursor` of the page before.
- `GET /admin/requests/{id}`: one record, by the gateway's id or a client's x-request-id (its
  newest record).

Without `request_log` configured both answer 404 saying how to turn it on; a sink that fails
answers 503. These calls are not logged themselves (observability/request_log.py).
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

import msgspec
from aiohttp import web

from gateway.errors import BadRequest
from gateway.errors import NotFound
from gateway.errors import StoreUnanswered
from gateway.observability.logs import iso_time
from gateway.observability.request_entry import MAX_LIMIT
from gateway.observability.request_entry import RequestEntry
from gateway.observability.request_entry import RequestQuery
from gateway.observability.request_entry import decode_cursor
from gateway.observability.request_entry import encode_cursor
from gateway.observability.request_log import REQUEST_LOG
from gateway.observability.request_log import RequestLog
from gateway.server.auth import authorize_admin

_STATUS = re.compile(r"([1-5])xx|([1-5][0-9][0-9])")
_TEXT_MAX = 512  # a filter value longer than any id or name we keep is a bad request
_to_builtins = msgspec.to_builtins


def _log(request: web.Request) -> RequestLog:
    found = request.app.get(REQUEST_LOG)
    if found is None:
        raise NotFound(
            "The request log is off: add a `request_log` section to the config "
            "(docs/request-log.md) and restart",
            code="request_log_disabled",
        )
    return found


def _time(value: str, param: str) -> float:
    try:
        number = float(value)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise BadRequest(
                f"{param} must be ISO 8601 or epoch seconds", param=param, code="invalid_time"
            ) from None
        if parsed.tzinfo is None:
            raise BadRequest(
                f"{param} needs a time zone (e.g. Z)", param=param, code="invalid_time"
            ) from None
        return parsed.timestamp()
    if not math.isfinite(number):
        raise BadRequest(f"{param} must be a finite number", param=param, code="invalid_time")
    return number


def query_of(params: Any) -> RequestQuery:
    """The search a request's query string asks for; a bad parameter is a 400 naming it."""
    query = RequestQuery()
    for name in ("key", "model", "request_id"):
        value = params.get(name)
        if value is not None:
            if not value or len(value) > _TEXT_MAX:
                raise BadRequest(f"{name} must be 1 to {_TEXT_MAX} characters", param=name)
            setattr(query, name, value)
    status = params.get("status")
    if status is not None:
        matched = _STATUS.fullmatch(status.lower())
        if matched is None:
            raise BadRequest("status must be a code (429) or a class (4xx)", param="status")
        if matched.group(1):
            query.status_class = int(matched.group(1))
        else:
            query.status = int(matched.group(2))
    if "since" in params:
        query.since = _time(params["since"], "since")
    if "until" in params:
        query.until = _time(params["until"], "until")
    limit = params.get("limit")
    if limit is not None:
        if not limit.isdigit() or not 1 <= int(limit) <= MAX_LIMIT:
            raise BadRequest(f"limit must be 1 to {MAX_LIMIT}", param="limit")
        query.limit = int(limit)
    cursor = params.get("cursor")
    if cursor is not None:
        query.before = decode_cursor(cursor)
        if query.before is None:
            raise BadRequest("cursor is not one this gateway gave", param="cursor")
    return query


def rendered(entry: RequestEntry) -> dict[str, Any]:
    out: dict[str, Any] = _to_builtins(entry)
    out["time_unix"] = entry.time
    out["time"] = iso_time(entry.time)
    return out


async def list_requests(request: web.Request) -> web.Response:
    await authorize_admin(request)
    log = _log(request)
    query = query_of(request.query)
    try:
        found = await log.sink.search(query)
    except Exception as exc:
        raise StoreUnanswered(f"the request log ({log.sink.label}) did not answer") from exc
    following = encode_cursor(found[-1]) if len(found) == query.limit else None
    return web.json_response({"data": [rendered(e) for e in found], "next_cursor": following})


async def get_request(request: web.Request) -> web.Response:
    await authorize_admin(request)
    log = _log(request)
    wanted = request.match_info["request_id"]
    if len(wanted) > _TEXT_MAX:
        raise BadRequest("the id is too long", param="id")
    try:
        entry = await log.sink.find(wanted)
    except Exception as exc:
        raise StoreUnanswered(f"the request log ({log.sink.label}) did not answer") from exc
    if entry is None:
        raise NotFound(f"No request {wanted!r} in the request log", code="request_not_found")
    return web.json_response(rendered(entry))


def add_request_log_routes(app: web.Application) -> None:
    app.router.add_get("/admin/requests", list_requests)
    app.router.add_get("/admin/requests/{request_id}", get_request)
