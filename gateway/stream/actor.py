"""The StreamActor: one per request, the only code that awaits on the hot path.

It owns everything of its request: the attempts the router planned, the upstream body, the
framing decoder, the translator, the accumulator, the usage and the timings. Nothing else
touches that state, so nothing here locks. Its loop is: read upstream bytes, feed the
decoder, feed the translator, feed the accumulator, write what comes out.

The commit point: the first content or tool-call delta, or `commit_after_s` without one.
Before it nothing has reached the client, so an upstream failure moves on to the next
attempt; at it the status line and headers are sent; after it a failure becomes an error
event in the stream. Deadlines (first byte, idle, total, commit, keep-alive) share one lazy
`Alarm` per attempt (upstream/alarm.py: an entry on the pool's clock, no event-loop timer of
its own): it fires at the earliest deadline known when armed, and on firing the actor checks
which deadline really passed and re-arms. What one upstream read brings leaves in one client
write; when the upstream's end came in the same read, with the tail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

from aiohttp import web

from gateway.config import ServerConfig
from gateway.emulation.request import ToolEmulation
from gateway.emulation.translator import EmulatedToolCalls
from gateway.errors import (
    GatewayError,
    NoUpstreamAvailable,
    UpstreamError,
    UpstreamProtocolError,
)
from gateway.framing.registry import make_decoder
from gateway.providers.base import NativeRequest, UpstreamCall, hide_credentials
from gateway.routing.balancer import unavailable
from gateway.routing.health import REFUSED
from gateway.routing.router import Attempt
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.chat_outbound import ChatOutbound
from gateway.stream.client_stream import ClientGone, ClientStream
from gateway.stream.deadlines import Deadlines
from gateway.stream.outbound import Outbound
from gateway.stream.pipeline import ChunkPipeline
from gateway.stream.unary import serve_accumulated, serve_unary
from gateway.upstream.alarm import Alarm
from gateway.upstream.credentials import AccessTokens
from gateway.upstream.http_client import HttpPool, PendingResponse
from gateway.upstream.outcome import count_move, final_error, report_failure, report_success
from gateway.upstream.transport import (
    PlaybackBody,
    UpstreamBody,
    access_token,
    answered,
    send_upstream,
    speaks,
)
from gateway.wire.openai_chat import ChatRequest, Usage


class StreamActor:
    """Serves one chat request through the planned attempts."""

    def __init__(
        self,
        *,
        http: web.Request,
        pool: HttpPool,
        tokens: AccessTokens,
        server: ServerConfig,
        deadline_s: float,
        request: ChatRequest,
        body: dict[str, Any],
        plan: list[Attempt],
        request_id: str,
        headers: dict[str, str],
        outbound: Outbound | None = None,
        native: NativeRequest | None = None,
        tool_emulation: ToolEmulation | None = None,
        on_answer: Callable[[StreamActor], Awaitable[None]] | None = None,
    ) -> None:
        self._http = http
        self.pool = pool
        self._tokens = tokens
        self._access_token: str | None = None
        self._server = server
        self._request = request
        self._body = body
        self._plan = plan
        self._emulation = tool_emulation
        # awaited once a stream's answer is complete, before its tail is encoded and sent
        # (accounting settles there, so the usage chunk can carry the cost and a crash after
        # the client saw the end cannot lose the spend)
        self._on_answer = on_answer
        self.request_id = request_id
        self._headers = headers
        self.loop = asyncio.get_running_loop()
        self.started = self.loop.time()
        self.created = int(time.time())
        self.deadline = self.started + deadline_s
        self.stream = bool(request.stream)
        if outbound is None:
            options = request.stream_options
            outbound = ChatOutbound(bool(options and options.include_usage))
        self.outbound = outbound
        self._native = native
        self.attempts = 0
        self.attempt: Attempt | None = None
        self.client = ClientStream(http, self.loop, server.client_write_timeout_s)
        self.alarm = Alarm(pool.clock)  # the deadline of whatever the actor waits for
        self.client.keepalive_bytes = outbound.keepalive
        self.accumulator: StreamAccumulator | None = None
        self._task: asyncio.Task[Any] | None = None
        self._shutdown_reason: str | None = None
        self.usage: Usage | None = None
        # How the current attempt ended when it still returned a response: the error a
        # committed stream ended with (an upstream's, or the shutdown's), or a client that
        # left (which says nothing about the key).
        self.stream_error: GatewayError | None = None
        self._released = False
        self.first_byte = 0.0  # loop time of the attempt's first upstream body byte
        # For the metrics and the access log (perf_counter times): when the served attempt's
        # first output arrived, and the gateway's own time (before each upstream request, and
        # processing what came back; upstream waits excluded).
        self.first_token_at = 0.0
        self.gateway_s = 0.0
        self.attempt_mark = 0.0

    @property
    def committed(self) -> bool:
        return self.client.committed

    # --- attempts ----------------------------------------------------------------------

    async def run(self) -> web.StreamResponse:
        self._task = asyncio.current_task()
        try:
            return await self._run_attempts()
        except asyncio.CancelledError:
            if self._shutdown_reason is None or self.committed:
                raise
            _uncancel()
            raise NoUpstreamAvailable(self._shutdown_reason, code="server_shutting_down") from None

    async def _run_attempts(self) -> web.StreamResponse:
        errors: list[UpstreamError] = []
        skipped: list[tuple[float, bool]] = []
        previous: Attempt | None = None
        for attempt in self._plan:
            started = self.loop.time()
            if started >= self.deadline:
                break
            health = attempt.health
            now = time.monotonic()
            # The plan was drawn before earlier attempts ran: a key may have become
            # unavailable since, and a half-open key admits only its one probe.
            ticket = health.begin(now, attempt.model)
            if ticket == REFUSED:
                skipped.append(health.refusal(now, attempt.model))
                continue
            if previous is not None:
                count_move(previous, attempt, self._request.model)
            previous = attempt
            self.attempts += 1
            self.attempt = attempt
            self.stream_error, self._released, self.first_byte = None, False, 0.0
            self.first_token_at, self.attempt_mark = 0.0, perf_counter()
            try:
                response = await self._serve(attempt)
            except UpstreamError as err:
                hide_credentials(err, attempt.key, self._access_token)
                report_failure(attempt, ticket, err)
                errors.append(err)
                if not err.retryable:
                    break
                continue
            except BaseException:
                health.released(ticket)
                raise
            self._report_end(attempt, ticket, started)
            return response
        if not errors:
            if skipped:
                raise unavailable(self._request.model, skipped)
            raise NoUpstreamAvailable("no upstream target could be tried for this model")
        raise final_error(errors)

    async def _serve(self, attempt: Attempt) -> web.StreamResponse:
        self._access_token = await access_token(self._tokens, attempt)
        if self.stream:
            return await self._serve_stream(attempt)
        # emulated tool calls are parsed from the text: the upstream streams then
        if attempt.adapter.native_unary and self._emulation is None:
            return await serve_unary(self, attempt)
        return await serve_accumulated(self, attempt)

    def _report_end(self, attempt: Attempt, ticket: int, started: float) -> None:
        """The attempt returned a response: a success, a failure after the commit point,
        or a client that left."""
        if isinstance(self.stream_error, UpstreamError):
            report_failure(attempt, ticket, self.stream_error)
        elif self._released:
            attempt.health.released(ticket)
        else:
            ttft = self.first_byte - started if self.first_byte else None
            report_success(attempt, ticket, ttft, self.usage)

    def call(self, attempt: Attempt, stream: bool) -> UpstreamCall:
        native = self._native
        return UpstreamCall(
            request=self._request,
            body=self._body,
            provider=attempt.provider,
            key=attempt.key,
            model=attempt.model,
            stream=stream,
            request_id=self.request_id,
            created=self.created,
            now=time.time(),
            access_token=self._access_token,
            api=attempt.api,
            native=native if native is not None and speaks(attempt, native.api) else None,
        )

    async def _answer(
        self, attempt: Attempt, sent: PendingResponse, deadlines: Deadlines
    ) -> UpstreamBody:
        """Wait for the upstream's answer under the read loop's lazy timer (armed by the
        caller), so the commit point and keep-alives happen even while an upstream holds
        its headers back (a gateway in front of this one, say)."""
        alarm = self.alarm
        try:
            while True:
                try:
                    return await answered(attempt.adapter, sent)
                except asyncio.CancelledError:
                    if not alarm.expired():
                        raise
                await self._on_wake(deadlines)
                alarm.arm(deadlines.next_wake(self.committed))
        except BaseException:
            sent.abort()
            raise

    # --- streaming -------------------------------------------------------------------------

    async def _serve_stream(self, attempt: Attempt) -> web.StreamResponse:
        try:
            pipeline = await self.pump(attempt, deliver=True)
        except UpstreamError as err:
            if not self.committed:
                raise
            self.stream_error = hide_credentials(err, attempt.key, self._access_token)
            return await self.client.end(self.outbound.error(err))
        except ClientGone:
            self._released = True
            assert self.client.response is not None
            return self.client.response
        except asyncio.CancelledError:
            if self._shutdown_reason is None or not self.committed:
                raise
            _uncancel()
            self._released = True
            shutdown = NoUpstreamAvailable(self._shutdown_reason, code="server_shutting_down")
            self.stream_error = shutdown
            return await self.client.end(self.outbound.error(shutdown))
        self.usage = pipeline.acc.usage
        if self._on_answer is not None:
            await self._on_answer(self)
        mark = perf_counter()
        tail = self.outbound.end(pipeline.acc, pipeline.usage_raw)
        self.gateway_s += perf_counter() - mark
        if self.outbound.settle is not None:
            await self.outbound.settle()  # before the client can see the end (and act on it)
        return await self.client.end(tail)

    async def pump(self, attempt: Attempt, *, deliver: bool) -> ChunkPipeline:
        """Run one upstream stream to its end; with `deliver`, write it to the client."""
        call = self.call(attempt, stream=True)
        timeouts = attempt.provider.timeouts
        self.client.pending = []
        self.client.headers = self.commit_headers()
        self.outbound.start_attempt(call.native is not None, call)
        acc = self.accumulator = StreamAccumulator(
            single_choice=not (self._request.n and self._request.n > 1),
            id_seed=self.request_id,
        )
        deadlines = self.client.deadlines = Deadlines(
            opened=self.loop.time(),
            timeouts=timeouts,
            request_deadline=self.deadline,
            commit_at=self.started + self._server.commit_after_s,
            keepalive_s=self._server.keepalive_s,
            deliver=deliver,
        )
        request = attempt.adapter.build_request(call)
        self.gateway_s += perf_counter() - self.attempt_mark
        sent = await send_upstream(self.pool, request, connect_s=timeouts.connect_s)
        alarm = self.alarm
        alarm.arm(deadlines.next_wake(self.committed))
        try:
            body = (
                sent
                if isinstance(sent, PlaybackBody)
                else await self._answer(attempt, sent, deadlines)
            )
            decoder = make_decoder(attempt.adapter.framing)
            translator = attempt.adapter.translator(call)
            if self._emulation is not None:
                translator = EmulatedToolCalls(translator, self._emulation, self.request_id)
            pipeline = ChunkPipeline(translator, acc, self.outbound)
            try:
                await self._read_loop(body, decoder, pipeline, deadlines, deliver)
            except BaseException:
                body.abort()
                raise
        finally:
            alarm.disarm()
        body.release()
        return pipeline

    async def _read_loop(
        self,
        body: UpstreamBody,
        decoder: Any,
        pipeline: ChunkPipeline,
        deadlines: Deadlines,
        deliver: bool,
    ) -> None:
        """Read the body to its end under the lazy timer (armed by the caller)."""
        loop, alarm, client = self.loop, self.alarm, self.client
        acc, translator = pipeline.acc, pipeline.translator
        spill = client if deliver else None
        while True:
            try:
                while True:
                    data = await body.read()
                    mark = perf_counter()
                    deadlines.last_upstream = now = loop.time()
                    if not deadlines.got_bytes:
                        self.first_byte = now
                        deadlines.got_bytes = True
                    if not data:
                        out = pipeline.run(decoder.close(), spill, closing=True)
                        self._processed(mark, acc.output_seen)
                        if not translator.done and (not acc.choices or acc.unfinished_choices()):
                            raise UpstreamProtocolError(
                                "the upstream closed the stream before it finished"
                            )
                        if deliver:
                            client.pending.extend(out)  # leaves with the tail
                        return
                    out = pipeline.run(decoder.feed(data), spill)
                    self._processed(mark, acc.output_seen)
                    if deliver and out:
                        # with the body's end already here, these bytes leave with the
                        # tail in one write (nothing waits that could have gone now)
                        await client.deliver(out, acc.output_seen, body.ended)
            except asyncio.CancelledError:
                if not alarm.expired():
                    raise
            await self._on_wake(deadlines)
            alarm.arm(deadlines.next_wake(self.committed))

    def _processed(self, mark: float, output_seen: bool) -> None:
        """One upstream read went through the pipeline (`mark`: when it arrived)."""
        self.gateway_s += perf_counter() - mark
        if output_seen and not self.first_token_at:
            self.first_token_at = mark

    # --- deadlines -------------------------------------------------------------------------

    async def _on_wake(self, deadlines: Deadlines) -> None:
        """The timer fired: act on whichever deadline really passed (maybe none)."""
        due = deadlines.due(self.loop.time(), self.committed)
        if due == "commit":
            await self.client.commit()
        elif due == "keepalive":
            await self.client.keepalive()

    # --- lifecycle -------------------------------------------------------------------------

    def shut_down(self, reason: str) -> None:
        """End this request now (graceful shutdown ran out of time): an error event if the
        stream is committed, the upstream aborted either way."""
        self._shutdown_reason = reason
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def commit_headers(self) -> dict[str, str]:
        headers = dict(self._headers)
        if self.attempt is not None:
            headers["x-gateway-provider"] = self.attempt.provider.name
            headers["x-gateway-model"] = self.attempt.model
        headers["x-gateway-attempts"] = str(self.attempts)
        return headers


def _uncancel() -> None:
    """Take back a cancellation this actor asked for itself (shutdown), so it can still
    write its answer; a cancellation from anyone else is always re-raised instead."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
