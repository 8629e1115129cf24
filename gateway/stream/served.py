"""What a request asks of its StreamActor (`ChatJob`) and what the actor answers
(`StreamOutcome`): both frozen, so the actor's own state stays its own.

The outcome is everything the request's caller needs after the actor ran: the response (or
the error to answer with), the attempts, the served attempt, the usage, the timings of the
access record, and what accounting estimates from when the upstream gave no usage.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from gateway.config import Recovery
from gateway.emulation.request import ToolEmulation
from gateway.errors import GatewayError
from gateway.observability.request_entry import AttemptEntry
from gateway.providers.base import NativeRequest
from gateway.providers.base import UnaryResult
from gateway.routing.router import Attempt
from gateway.stream.accumulator import StreamAccumulator
from gateway.upstream.attempts import AttemptTracer
from gateway.upstream.attempts import Wider
from gateway.upstream.retries import NO_RETRIES
from gateway.upstream.retries import RetryPolicy
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Usage


class ChatJob(msgspec.Struct, frozen=True, kw_only=True):
    """One canonical chat request, as the actor serves it."""

    request: ChatRequest  # the canonical request, typed
    body: dict[str, Any]  # the canonical request as JSON (what OpenAI-compatible upstreams get)
    plan: list[Attempt]  # the router's attempts, in order
    request_id: str
    headers: dict[str, str]  # response headers of every answer (x-request-id)
    deadline_s: float  # the whole request's deadline (routing.deadline_s)
    native: NativeRequest | None = None  # the client's own request, for upstreams of its API
    tool_emulation: ToolEmulation | None = None
    # the request log's and traces' view of the attempts (None: neither is on)
    journal: list[AttemptEntry] | None = None
    tracer: AttemptTracer | None = None
    retries: RetryPolicy = NO_RETRIES  # same-target retries (routing.retries_per_target)
    wider: Wider | None = None  # context-window fallbacks (Router.wider for this model)
    recovery: Recovery | None = None  # models[].recovery of a stream's model (None: off)
    prompt_tokens: int = 0  # the prompt's estimate, for a broken attempt's usage


class StreamOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How the actor's request ended (or, passed to `on_answer`, where it stands when a
    stream's answer is complete). The timings are perf_counter times."""

    response: web.StreamResponse | None  # None: the request failed (`error`) or is not done
    error: GatewayError | None  # what the client is answered with instead of a response
    attempts: int  # attempts made (x-gateway-attempts)
    attempt: Attempt | None  # the served attempt (or the last one tried)
    stream: bool  # the client asked for a stream
    committed: bool  # the client received the status and headers
    released: bool  # the client left, or shutdown ended the stream: not the key's fault
    client_too_slow: bool  # the client stopped reading and was cut off
    stream_error: GatewayError | None  # what a committed stream ended with
    usage: Usage | None  # the upstream's count, if it gave one
    # part of `usage` is an estimate (a stream continued after an attempt that broke
    # before its usage came)
    usage_estimated: bool = False
    # What was streamed, for the estimate when the upstream gave no usage (None: the answer
    # was passed through whole, and its body is the estimate's text)
    accumulator: StreamAccumulator | None
    unary: UnaryResult | None = None  # a non-streamed upstream answer, as it came (the cache's)
    first_token_at: float  # when the served attempt's first output arrived (0: none)
    gateway_s: float  # the gateway's own time, upstream waits excluded
