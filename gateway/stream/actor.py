"""The StreamActor: one per request, the only code that awaits on the hot path.

It is handed its request as a frozen `ChatJob` and answers with a frozen `StreamOutcome`
(stream/served.py). In between it owns everything of its request: the upstream body, the
framing decoder, the translator, the accumulator, the usage and the timings. Nothing else
touches that state, so nothing here locks. Its attempts run through the attempt runner
(upstream/attempts.py: key health, token, failover, redaction), the actor being the step:
`send` serves one attempt (a stream, an upstream's whole answer passed through, or a
streamed answer accumulated for a non-streaming client) and `ended` says how it went. Its
loop is: read upstream bytes, feed the decoder, feed the translator, feed the accumulator,
write what comes out.

The commit point: the first content or tool-call delta, or `commit_after_s` without one.
Before it nothing has reached the client, so an upstream failure moves on to the next
attempt; at it the status line and headers are sent; after it a failure becomes an error
event in the stream. Deadlines (first byte, idle, total, commit, keep-alive) share one lazy
`Alarm` (the runner's; upstream/alarm.py: an entry on the pool's clock, no event-loop timer
of its own): it fires at the earliest deadline known when armed, and on firing the actor checks
which deadline really passed and re-arms. What one upstream read brings leaves in one client
write; when the upstream's end came in the same read, with the tail.

The read loop of a stream (read, decode, translate, accumulate, deliver, under the deadlines)
is stream/read_loop.py's; it reports to the actor through `processed` and `on_wake`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from collections.abc import Callable
from time import perf_counter
from typing import Any

from aiohttp import web

from gateway.config import ServerConfig
from gateway.emulation.translator import EmulatedToolCalls
from gateway.errors import GatewayError
from gateway.errors import NoUpstreamAvailable
from gateway.errors import UpstreamError
from gateway.errors import UpstreamTimeout
from gateway.framing.registry import make_decoder
from gateway.providers.base import TokenSource
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.routing.router import Attempt
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.chat_outbound import ChatOutbound
from gateway.stream.client_stream import ClientGone
from gateway.stream.client_stream import ClientStream
from gateway.stream.client_stream import failover_comment
from gateway.stream.client_stream import recovered_comment
from gateway.stream.deadlines import Deadlines
from gateway.stream.outbound import Outbound
from gateway.stream.pipeline import ChunkPipeline
from gateway.stream.read_loop import read_to_end
from gateway.stream.recovery import StreamRecovery
from gateway.stream.served import ChatJob
from gateway.stream.served import StreamOutcome
from gateway.upstream.attempts import AttemptRunner
from gateway.upstream.attempts import Ended
from gateway.upstream.credentials import AccessTokens
from gateway.upstream.http_client import HttpPool
from gateway.upstream.http_client import PendingResponse
from gateway.upstream.transport import PlaybackBody
from gateway.upstream.transport import UpstreamBody
from gateway.upstream.transport import answered
from gateway.upstream.transport import fetch_all
from gateway.upstream.transport import send_upstream
from gateway.upstream.transport import speaks
from gateway.wire.openai_chat import Usage


class StreamActor:
    """Serves one chat request through the planned attempts (an `AttemptRunner` step)."""

    def __init__(
        self,
        http: web.Request,
        job: ChatJob,
        *,
        pool: HttpPool,
        tokens: AccessTokens,
        server: ServerConfig,
        outbound: Outbound | None = None,
        on_answer: Callable[[StreamOutcome], Awaitable[None]] | None = None,
    ) -> None:
        request = job.request
        self._job = job
        self._pool = pool
        self._server = server
        # awaited once a stream's answer is complete, before its tail is encoded and sent
        # (accounting settles there, so the usage chunk can carry the cost and a crash after
        # the client saw the end cannot lose the spend)
        self._on_answer = on_answer
        self.loop = loop = asyncio.get_running_loop()
        self.started = loop.time()
        self.created = int(time.time())
        self.stream = bool(request.stream)
        if outbound is None:
            options = request.stream_options
            outbound = ChatOutbound(bool(options and options.include_usage))
        self.outbound = outbound
        self.runner = AttemptRunner(
            plan=job.plan,
            model=request.model,
            deadline_s=job.deadline_s,
            pool=pool,
            tokens=tokens,
            journal=job.journal,
            tracer=job.tracer,
            retries=job.retries,
            wider=job.wider,
        )
        self.recovery = StreamRecovery.of(job) if self.stream else None
        self.client = ClientStream(http, loop, server.client_write_timeout_s)
        self.client.keepalive_bytes = outbound.keepalive
        self.accumulator: StreamAccumulator | None = None
        self._task: asyncio.Task[Any] | None = None
        self._shutdown_reason: str | None = None
        self.usage: Usage | None = None
        self.unary: UnaryResult | None = None  # a non-streamed upstream answer, as it came
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

    @property
    def _resuming(self) -> StreamRecovery | None:
        """The stream's recovery once it broke after content and is being continued."""
        recovery = self.recovery
        return recovery if recovery is not None and recovery.resumed is not None else None

    # --- the request ---------------------------------------------------------------------

    async def run(self) -> StreamOutcome:
        """Serve the request: its response, or the error to answer with, in the outcome.
        A cancellation (client gone) propagates; `outcome()` then says where it stood."""
        self._task = asyncio.current_task()
        try:
            response = await self.runner.run(self)
        except GatewayError as err:
            if not self.committed:
                return self.outcome(error=err)
            resuming = self._resuming
            if resuming is not None:
                err = resuming.failed(self.runner.attempt)  # no target continued it
            # committed by time (headers, keep-alives) and every attempt failed before any
            # answer, or after content and none continued it: the stream ends with the error
            self.stream_error = err
            return self.outcome(await self.client.end(self.outbound.error(err)))
        except asyncio.CancelledError:
            if self._shutdown_reason is None or self.committed:
                raise
            _uncancel()
            shutdown = NoUpstreamAvailable(self._shutdown_reason, code="server_shutting_down")
            return self.outcome(error=shutdown)
        return self.outcome(response)

    def outcome(
        self, response: web.StreamResponse | None = None, error: GatewayError | None = None
    ) -> StreamOutcome:
        """Where the request stands, frozen."""
        runner, client = self.runner, self.client
        return StreamOutcome(
            response=response,
            error=error,
            attempts=runner.attempts,
            attempt=runner.attempt,
            stream=self.stream,
            committed=client.committed,
            released=self._released,
            client_too_slow=client.too_slow,
            stream_error=self.stream_error,
            usage=self.usage,
            usage_estimated=self.recovery is not None and self.recovery.estimated,
            accumulator=self.accumulator,
            unary=self.unary,
            first_token_at=self.first_token_at,
            gateway_s=self.gateway_s,
        )

    # --- one attempt (the runner's step) -------------------------------------------------

    def refuses(self, attempt: Attempt) -> None:
        return None  # a chat target takes any chat request

    def token_source(self, attempt: Attempt) -> TokenSource | None:
        return attempt.adapter.token_source(attempt.key)

    async def send(self, attempt: Attempt) -> web.StreamResponse:
        self.stream_error, self._released, self.first_byte = None, False, 0.0
        self.unary = None
        self.attempt_mark = perf_counter()
        if self._resuming is None:
            self.first_token_at = 0.0  # (a continued stream's first token came before)
        if self.stream:
            return await self._serve_stream(attempt)
        # emulated tool calls are parsed from the text: the upstream streams then
        if attempt.adapter.native_unary and self._job.tool_emulation is None:
            return await self._serve_unary(attempt)
        return await self._serve_accumulated(attempt)

    def ended(self) -> Ended:
        """The attempt returned a response: a success, a failure after the commit point,
        or a client that left."""
        failed = self.stream_error
        return Ended(
            failure=failed if isinstance(failed, UpstreamError) else None,
            released=self._released,
            first_byte_at=self.first_byte,
            usage=self.usage,
        )

    def call(self, attempt: Attempt, stream: bool) -> UpstreamCall:
        job = self._job
        native = job.native
        request, body = job.request, job.body
        resuming = self._resuming
        if resuming is not None:
            request, body = resuming.request(attempt, request, body)  # the answer so far
        return self.runner.call(
            attempt,
            request,
            body,
            stream=stream,
            request_id=job.request_id,
            created=self.created,
            native=native if native is not None and speaks(attempt, native.api) else None,
        )

    async def _answer(
        self, attempt: Attempt, sent: PendingResponse, deadlines: Deadlines
    ) -> UpstreamBody:
        """Wait for the upstream's answer under the read loop's lazy timer (armed by the
        caller), so the commit point and keep-alives happen even while an upstream holds
        its headers back (a gateway in front of this one, say)."""
        alarm = self.runner.alarm
        try:
            while True:
                try:
                    return await answered(attempt.adapter, sent)
                except asyncio.CancelledError:
                    if not alarm.expired():
                        raise
                await self.on_wake(deadlines)
                alarm.arm(deadlines.next_wake(self.committed))
        except BaseException:
            sent.abort()
            raise

    # --- non-streaming answers ---------------------------------------------------------------
    # Their first token is the whole answer: `first_token_at` is when it was complete, and
    # decoding and re-encoding it count as gateway time.

    async def _serve_unary(self, attempt: Attempt) -> web.StreamResponse:
        """Non-streaming upstream, answer passed through as the upstream wrote it."""
        call = self.call(attempt, stream=False)
        timeouts = attempt.provider.timeouts
        request = attempt.adapter.build_request(call)
        request.egress = attempt.provider.egress  # its proxy and TLS trust
        if self.runner.traceparent is not None:  # tracing is on: the attempt span's context
            request.headers["traceparent"] = self.runner.traceparent
        self.gateway_s += perf_counter() - self.attempt_mark
        # A non-streaming upstream sends its first byte when it is done: only total_s
        # applies, one deadline for the answer and its body, under one timer.
        total_s = timeouts.total_s
        data, _ = await self.runner.bounded(
            fetch_all(self._pool, attempt.adapter, request, connect_s=timeouts.connect_s),
            total_s,
            lambda: UpstreamTimeout(f"the upstream did not answer within {total_s:g}s"),
        )
        self.first_byte = self.loop.time()  # a non-streamed answer's first token
        self.first_token_at = mark = perf_counter()
        result = attempt.adapter.unary_result(call, data)
        self.usage, self.unary = result.usage, result
        answer = self.outbound.unary(result)
        self.gateway_s += perf_counter() - mark
        return await self._respond(answer)

    async def _serve_accumulated(self, attempt: Attempt) -> web.StreamResponse:
        """Non-streaming client, streaming-only upstream: accumulate, answer once."""
        acc = (await self._pump(attempt, deliver=False)).acc
        self.first_token_at = mark = perf_counter()
        completion = self.outbound.completion(
            acc,
            id=acc.id or "chatcmpl-" + self._job.request_id,
            model=acc.model or attempt.model,
            created=acc.created,
        )
        self.usage = acc.usage
        self.gateway_s += perf_counter() - mark
        return await self._respond(completion)

    async def _respond(self, body: bytes) -> web.Response:
        if self.outbound.settle is not None:
            await self.outbound.settle()
        return web.Response(
            body=body, content_type="application/json", headers=self.commit_headers()
        )

    # --- streaming -------------------------------------------------------------------------

    async def _serve_stream(self, attempt: Attempt) -> web.StreamResponse:
        try:
            pipeline = await self._pump(attempt, deliver=True)
        except UpstreamError as err:
            if not self.committed or not self.client.answered:
                # nothing of an answer reached the client (at most headers and keep-alives
                # after commit_after_s): the next attempt's answer can still be the stream
                raise
            recovery = self.recovery
            if recovery is not None:
                if not recovery.mid_answer():
                    raise  # a continuing attempt failed before joining: the next one
                assert self.accumulator is not None
                if recovery.broke(self.runner.hide(err), self.accumulator, attempt):
                    self.runner.resuming = recovery.takes
                    raise  # the next target that can continues the answer
            self.stream_error = self.runner.hide(err)
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
        resuming = self._resuming
        if resuming is not None:
            self.usage = resuming.recovered(pipeline.acc, attempt)  # every attempt's
            pipeline.usage_raw = None
        if self._on_answer is not None:
            await self._on_answer(self.outcome())
        mark = perf_counter()
        tail = self.outbound.end(pipeline.acc, pipeline.usage_raw)
        self.gateway_s += perf_counter() - mark
        if self.outbound.settle is not None:
            await self.outbound.settle()  # before the client can see the end (and act on it)
        return await self.client.end(tail)

    async def _pump(self, attempt: Attempt, *, deliver: bool) -> ChunkPipeline:
        """Run one upstream stream to its end; with `deliver`, write it to the client."""
        job = self._job
        call = self.call(attempt, stream=True)
        timeouts = attempt.provider.timeouts
        recovery, acc = self._resuming, self.accumulator
        if recovery is not None and acc is not None:
            # the stream goes on: what the broken attempt said leaves before the rest
            recovery.attempt(acc)
            await self.client.flush()
        else:
            self.client.pending = []
            self.client.headers = self.commit_headers()
            self.outbound.start_attempt(call.native is not None, call)
            acc = self.accumulator = StreamAccumulator(
                single_choice=not (job.request.n and job.request.n > 1),
                id_seed=job.request_id,
            )
        deadlines = self.client.deadlines = Deadlines(
            opened=self.loop.time(),
            timeouts=timeouts,
            request_deadline=self.runner.deadline,
            commit_at=self.started + self._server.commit_after_s,
            keepalive_s=self._server.keepalive_s,
            deliver=deliver,
        )
        request = attempt.adapter.build_request(call)
        request.egress = attempt.provider.egress  # its proxy and TLS trust
        if self.runner.traceparent is not None:  # tracing is on: the attempt span's context
            request.headers["traceparent"] = self.runner.traceparent
        self.gateway_s += perf_counter() - self.attempt_mark
        sent = await send_upstream(self._pool, request, connect_s=timeouts.connect_s)
        alarm = self.runner.alarm
        alarm.arm(deadlines.next_wake(self.committed))
        try:
            body = (
                sent
                if isinstance(sent, PlaybackBody)
                else await self._answer(attempt, sent, deadlines)
            )
            if deliver and self.committed and self.runner.attempts > 1:
                # the stream was committed before an earlier attempt failed: say who answers
                name, attempts = attempt.provider.name, self.runner.attempts
                await self.client.write(
                    recovered_comment(name, attempts)
                    if recovery is not None
                    else failover_comment(name, attempts),
                    progress=False,
                )
            decoder = make_decoder(attempt.adapter.framing)
            translator = attempt.adapter.translator(call)
            if recovery is not None:
                translator = recovery.translator(attempt, translator)
            emulation = job.tool_emulation
            if emulation is not None:
                translator = EmulatedToolCalls(translator, emulation, job.request_id)
            pipeline = ChunkPipeline(translator, acc, self.outbound)
            try:
                await read_to_end(self, body, decoder, pipeline, deadlines, deliver)
            except BaseException:
                body.abort()
                raise
        finally:
            alarm.disarm()
        body.release()
        return pipeline

    def processed(self, mark: float, output_seen: bool) -> None:
        """One upstream read went through the pipeline (`mark`: when it arrived)."""
        self.gateway_s += perf_counter() - mark
        if output_seen and not self.first_token_at:
            self.first_token_at = mark

    # --- deadlines -------------------------------------------------------------------------

    async def on_wake(self, deadlines: Deadlines) -> None:
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
        runner = self.runner
        return {**self._job.headers, **runner.served_headers()}


def _uncancel() -> None:
    """Take back a cancellation this actor asked for itself (shutdown), so it can still
    write its answer; a cancellation from anyone else is always re-raised instead."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
