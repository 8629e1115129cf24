"""POST /v1/responses: the OpenAI Responses API, served through the canonical chat path.

The request is translated to a canonical chat request (gateway/inbound/responses_request)
and served by `serve_chat` with a `ResponsesOutbound`; targets with `api: responses` get
the client's own request instead (`NativeRequest`), with `previous_response_id` expanded
into `input`. A response that completes (or ends incomplete) is stored in the key-value
store under `resp:<id>` for `store.responses_ttl_s`, unless the request says `store: false`,
before its last event (or its body) reaches the client: a client that continues at once
finds it. A store that does not answer then costs the continuation, not the answer (logged).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from aiohttp import web

from gateway.errors import NotFound
from gateway.inbound.responses_events import response_template
from gateway.inbound.responses_outbound import ResponsesOutbound
from gateway.inbound.responses_request import (
    ResponsesRequest,
    StoredResponse,
    history_for_native,
    input_items,
    stored_decoder,
    stored_encoder,
    stored_key,
    to_chat,
)
from gateway.inbound.responses_result import Finished
from gateway.providers.base import NativeRequest
from gateway.server.auth import authenticate
from gateway.server.inference import refuse_while_draining, serve_chat
from gateway.server.limits import check_responses
from gateway.server.request_body import read_json_object, typed
from gateway.server.state import STATE
from gateway.store.kv import KeyValueStore, StoreError

log = logging.getLogger("gateway.responses")


class PreviousResponseNotFound(NotFound):
    code = "previous_response_not_found"


async def _previous(kv: KeyValueStore, response_id: str) -> StoredResponse:
    raw = await kv.get(stored_key(response_id))
    if raw is None:
        raise PreviousResponseNotFound(
            f"Previous response with id '{response_id}' not found.",
            param="previous_response_id",
        )
    return stored_decoder.decode(raw)


async def create_response(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    authenticate(request)
    refuse_while_draining(request)
    body = await read_json_object(request)
    parsed = typed(body, ResponsesRequest)
    check_responses(body, state.config.server.limits)
    stored = None
    if isinstance(parsed.previous_response_id, str):
        stored = await _previous(state.kv, parsed.previous_response_id)
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
        record = StoredResponse(id=finished.id, input=[*history, *items], output=finished.output)
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
    )
