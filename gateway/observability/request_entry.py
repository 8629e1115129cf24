"""What the request log keeps of one request (`RequestEntry`, with an `AttemptEntry` per
upstream attempt), how it is searched (`RequestQuery`, the cursor), and what a sink must do
(`RequestLogSink`). Types only: the queue and writer are request_log.py's, the sinks
request_log_sqlite.py's and request_log_postgres.py's, the admin routes
gateway/server/admin_requests.py's.

Times are epoch seconds (floats). An entry's `id` is minted by the gateway and unique across
workers and replicas (the process prefix of `GatewayState.new_request_id`); the client's own
`x-request-id` is `client_request_id`, which any number of records may share (a client may
reuse one: it is searched, never trusted as an identity).
"""

from __future__ import annotations

import base64
import binascii
from typing import Protocol

import msgspec

MAX_LIMIT = 1000  # records per page of GET /admin/requests
DEFAULT_LIMIT = 100


class AttemptEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One upstream attempt: which provider key was tried for which upstream model, how it
    ended (`status`: the upstream's HTTP status, None when none came; `error`: the error kind
    of gateway_upstream_errors_total, None when it served the answer), and how long it took."""

    provider: str
    key: str  # the key's name, or `#N` (its index in the provider's keys)
    model: str
    started: float  # epoch seconds
    seconds: float
    status: int | None = None
    error: str | None = None


class RequestEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One request, as it ended (docs/request-log.md lists the fields)."""

    id: str
    time: float  # epoch seconds the request was received
    route: str
    method: str
    status: int  # what the client got (a committed stream that failed: its error's status)
    duration_s: float
    client_request_id: str | None = None
    key_name: str | None = None
    key_id: str | None = None
    model: str | None = None  # as the client sent it
    provider: str | None = None  # of the served (or last) attempt
    upstream_model: str | None = None
    stream: bool = False
    attempts: list[AttemptEntry] = []
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost_usd: float | None = None
    cache: str | None = None  # hit | miss | bypass, when the response cache was asked
    cache_saved_usd: float | None = None  # a hit: what its answer cost when first served
    ttft_s: float | None = None
    overhead_s: float | None = None
    error: str | None = None  # the error's code (or type)
    error_message: str | None = None
    request_body: str | None = None  # JSON text, per request_log.bodies (secrets cut)
    response_body: str | None = None


class RequestQuery(msgspec.Struct, kw_only=True):
    """A search of the log, newest first: every filter set must match."""

    key: str | None = None  # a key's name or id
    model: str | None = None  # the client's model name
    status: int | None = None  # an exact status...
    status_class: int | None = None  # ...or a class: 4 for `4xx`
    request_id: str | None = None  # the client's x-request-id (or the gateway's id)
    since: float | None = None  # epoch seconds, inclusive
    until: float | None = None  # epoch seconds, exclusive
    limit: int = DEFAULT_LIMIT
    before: tuple[float, str] | None = None  # (time, id) of the last record of the page before


class RequestLogSink(Protocol):
    """Where records go. `write` is idempotent by `id` (a batch written again after a failure
    adds nothing twice) and raises when the sink failed (the writer keeps the batch and tries
    again); the others raise too, and the admin routes answer 503."""

    label: str  # what logs and errors may show of the sink (no password)

    async def open(self) -> None: ...

    async def write(self, entries: list[RequestEntry]) -> None: ...

    async def search(self, query: RequestQuery) -> list[RequestEntry]: ...

    async def find(self, request_id: str) -> RequestEntry | None:
        """The record of the gateway's id, else the newest whose client_request_id it is."""
        ...

    async def prune(self, before: float) -> int:
        """Delete records older than `before` (epoch seconds); how many went."""
        ...

    async def close(self) -> None: ...


_cursor_encoder = msgspec.json.Encoder()
_cursor_decoder = msgspec.json.Decoder(tuple[float, str])


def encode_cursor(entry: RequestEntry) -> str:
    """The opaque cursor of the page after the one `entry` ends."""
    raw = _cursor_encoder.encode((entry.time, entry.id))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str] | None:
    """The (time, id) a cursor names; None when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return _cursor_decoder.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        return None
