"""POST /v1/responses: the OpenAI Responses API, served through the canonical chat path.

The request is translated to a canonical chat request (gateway/inbound/responses_request)
and served by `serve_chat` with a `ResponsesOutbound`; targets with `api: responses` get
the client's own request instead (`NativeRequest`), with `previous_response_id` expanded
into `input`. A response that completes (or ends incomplete) is stored in the key-value
store under `resp:<id>` for `store.responses_ttl_s`, unless the request says `store: false`,
before its last event (or its body) reaches the client: a client that continues at once
finds it. A store that does not answer then costs the continuation, not the answer (logged).

A stored response belongs to its creator (`owner_of`): any other key, the master key
included, is told it does not exist. Continuing one sends its whole history upstream, so the
reservation's prompt estimate counts the stored record's size besides the request body.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from typing import Any

from aiohttp import web

from gateway.accounting.service import Principal
from gateway.errors import NotFound
from gateway.inbound.responses_events import response_template
from gateway.inbound.responses_outbound import ResponsesOutbound
from gateway.inbound.responses_request import ResponsesRequest
from gateway.inbound.responses_request import StoredResponse
from gateway.inbound.responses_request import history_for_native
from gateway.inbound.responses_request import input_items
from gateway.inbound.responses_request import stored_decoder
from gateway.inbound.responses_request import stored_encoder
from gateway.inbound.responses_request import stored_key
from gateway.inbound.responses_request import to_chat
from gateway.inbound.responses_result import Finished
from gateway.providers.base import NativeRequest
from gateway.server.auth import authenticate
from gateway.server.inference import refuse_while_draining
from gateway.server.inference import serve_chat
from gateway.server.limits import check_responses
from gateway.server.request_body import read_json_object
from gateway.server.request_body import typed
from gateway.server.state import STATE
from gateway.store.kv import KeyValueStore
from gateway.store.kv import StoreError

log = logging.getLogger("gateway.responses")


class PreviousResponseNotFound(NotFound):
    code = "previous_response_not_found"


def owner_of(principal: Principal) -> str:
    """Who a stored response belongs to: the master key, or the caller's key (by the hash of
    its secret; on an open gateway, anyone sending no key is one caller)."""
    return f"{principal.kind}:{principal.secret_hash}"


async def _previous(kv: KeyValueStore, response_id: str, owner: str) -> tuple[StoredResponse, int]:
    """The stored response `response_id` and its size in bytes (what continuing it sends
    upstream besides the request's own body). Another caller's response is answered as an
    unknown id: holding an id is not enough to read a conversation, nor to learn it exists."""
    raw = await kv.get(stored_key(response_id))
    stored = stored_decoder.decode(raw) if raw is not None else None
    if stored is None or not hmac.compare_digest(stored.owner, owner):
        raise PreviousResponseNotFound(
            f"Previous response with id '{response_id}' not found.",
            param="previous_response_id",
        )
    return stored, len(raw or b"")


async def create_response(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    owner = owner_of(authenticate(request))
    refuse_while_draining(request)
    body = await read_json_object(request)
    parsed = typed(body, ResponsesRequest)
    check_responses(body, state.config.server.limits)
    stored, history_chars = None, 0
    if isinstance(parsed.previous_response_id, str):
        stored, history_chars = await _previous(state.kv, parsed.previous_response_id, owner)
    history = [*stored.input, *stored.output] if stored is not None else []
    chat, chat_body = to_chat(parsed, body, history)
    items = input_items(parsed)

    native_body: dict[str, Any] = {k: v for k, v in body.items() if k != "previous_response_id"}
    if stored is not None:
        native_body["input"] = [*history_for_native(stored), *items]

    # Unguessable: holding a response id is what lets a client continue its conversation.
    response_id = "resp_" + secrets.token_hex(24)
    template = response_template(
        body, id=response_id, model=parsed.model, created_at=int(time.time())
    )

    async def store(finished: Finished) -> None:
        record = StoredResponse(
            id=finished.id, input=[*history, *items], output=finished.output, owner=owner
        )
        try:
            await state.kv.put(
                stored_key(finished.id),
                stored_encoder.encode(record),
                state.config.store.responses_ttl_s,
            )
        except StoreError as exc:
            # the answer itself is whole; only continuing from it will not work
            log.warning("response %s not stored: %s", finished.id, type(exc).__name__)

    outbound = ResponsesOutbound(
        template, time.time, on_finished=store if parsed.store is not False else None
    )
    return await serve_chat(
        request,
        chat,
        chat_body,
        outbound=outbound,
        native=NativeRequest(api="responses", body=native_body),
        history_chars=history_chars,
        api="responses",
    )
