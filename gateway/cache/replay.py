"""A hit served in the client's API and mode, and a miss's answer taken for the cache.

A hit's chunks (entry.replay_chunks) go through a fresh accumulator and the route's own
`Outbound`, exactly as an upstream's would: a stream leaves as that API's events, a
non-streaming request gets the outbound's whole-answer body. The outbound's `settle` runs
before the answer leaves, as for any answer (a Responses answer is stored for
`previous_response_id` there).
"""

from __future__ import annotations

import time

import msgspec
from aiohttp import web

from gateway.cache.entry import CachedAnswer
from gateway.cache.entry import answer_of
from gateway.cache.entry import replay_chunks
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.client_stream import SSE_HEADERS
from gateway.stream.outbound import Outbound
from gateway.stream.served import StreamOutcome
from gateway.wire.openai_chat import ChatCompletion

_completion = msgspec.json.Decoder(ChatCompletion)


async def serve_hit(
    request: web.Request,
    answer: CachedAnswer,
    outbound: Outbound,
    *,
    stream: bool,
    request_id: str,
    model: str,
    headers: dict[str, str],
) -> web.StreamResponse:
    """Answer `request` from `answer`; `headers` go on the response."""
    outbound.start_attempt(False, None)
    acc = StreamAccumulator(single_choice=True, id_seed=request_id)
    id, created = "chatcmpl-" + request_id, int(time.time())
    model = answer.model or model
    chunks = replay_chunks(answer, id=id, model=model, created=created)
    if not stream:
        for chunk in chunks:
            acc.add(chunk)
        body = outbound.completion(acc, id=id, model=model, created=created)
        if outbound.settle is not None:
            await outbound.settle()
        return web.Response(body=body, content_type="application/json", headers=headers)
    parts = []
    for chunk in chunks:
        fixed = acc.add(chunk)
        if fixed is not None:
            parts.append(outbound.chunk(fixed, None))
    parts.append(outbound.end(acc, None))
    if outbound.settle is not None:
        await outbound.settle()
    response = web.StreamResponse(headers={**SSE_HEADERS, **headers})
    await response.prepare(request)
    await response.write(b"".join(parts))
    await response.write_eof()
    return response


def answer_of_outcome(outcome: StreamOutcome, emulated: bool) -> CachedAnswer | None:
    """The complete answer a request got, or None when it must not be stored: an error, a
    stream cut off or ended with an error, a client that left, an answer that did not end
    by itself, several choices, or (tools emulated) a text that may hold an envelope that
    did not parse."""
    if outcome.response is None or outcome.stream_error is not None:
        return None
    if outcome.released or outcome.client_too_slow:
        return None
    acc = outcome.accumulator
    completion: ChatCompletion | None = None
    if acc is not None:
        completion = acc.completion(id="", model=acc.model, created=0)
    elif outcome.unary is not None and outcome.unary.api == "chat":
        try:
            completion = _completion.decode(outcome.unary.body)
        except msgspec.DecodeError:
            return None
    if completion is None:
        return None  # an upstream's own answer in another API: not canonical, not kept
    answer = answer_of(completion)
    if answer is not None and emulated and not answer.tool_calls and "{" in (answer.content or ""):
        return None
    return answer
