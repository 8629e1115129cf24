"""What watches each request besides the metrics and the access line: the request log and
traces. `Observers` exists only when `request_log` or `tracing` is configured; the
middleware (errors.py) then gives each request a journal of its attempts and (tracing) a
trace, and hands the ended request here. Neither configured: none of this runs per request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from gateway.config import Config
from gateway.observability.access import RequestRecord
from gateway.observability.logs import configured_secrets
from gateway.observability.logs import redact
from gateway.observability.request_log import RequestLog
from gateway.observability.request_log import entry_of
from gateway.server.observer_routes import TRACED_ROUTES
from gateway.server.request_body import RAW_BODY
from gateway.server.state import REQUEST_ID
from gateway.server.state import STATE
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.served import StreamOutcome


class _FinishChoice(msgspec.Struct):
    finish_reason: str | None = None


class _Finish(msgspec.Struct):
    """The finish reason of a unary answer: chat's, or Anthropic's `stop_reason`."""

    choices: list[_FinishChoice] = []
    stop_reason: str | None = None


_finish_decoder = msgspec.json.Decoder(_Finish)
_completion_encoder = msgspec.json.Encoder()

if TYPE_CHECKING:
    from gateway.observability.request_trace import RequestTrace
    from gateway.observability.tracing import Tracing


class Observers:
    """The request log and the tracer of one process (either may be None, not both)."""

    __slots__ = ("bodies", "request_log", "secrets", "tracing")

    def __init__(
        self, config: Config, request_log: RequestLog | None, tracing: Tracing | None
    ) -> None:
        self.request_log = request_log
        self.tracing = tracing
        self.bodies = config.request_log.bodies if config.request_log is not None else "off"
        self.secrets = configured_secrets(config)

    def reconfigure(self, config: Config) -> None:
        """A reloaded config: its secrets are cut from the records from now on."""
        self.secrets = configured_secrets(config)

    def ended(
        self,
        request: web.Request,
        record: RequestRecord,
        status: int,
        duration: float,
        ttft: float | None,
    ) -> None:
        trace = record.trace
        if trace is not None:
            if trace.wants_content:  # tracing.content: the texts, secrets cut
                self._content(request, record, trace)
            trace.finish(
                status=record.failed_status or status,
                model=record.model,
                provider=record.provider,
                response_model=record.upstream_model,
                input_tokens=record.input_tokens,
                output_tokens=record.output_tokens,
                finish_reason=record.finish_reason,
                error=record.error,
                operation=TRACED_ROUTES.get(record.route, "chat"),
            )
        request_log = self.request_log
        if request_log is None:
            return
        if self.bodies != "off" and record.request_body is None:
            record.request_body = request.get(RAW_BODY)  # the body as the client sent it
        answer = record.response_body
        if isinstance(answer, StreamAccumulator):
            record.response_body = None
            if self.bodies != "off":  # what the client assembled from the stream
                completion = answer.completion(
                    id=request[REQUEST_ID], model=record.upstream_model or "", created=0
                )
                record.response_body = _completion_encoder.encode(completion)
        request_id = request[REQUEST_ID]
        given = request.headers.get("x-request-id")
        client_id = given if given == request_id else None  # a sane id the client sent
        # the record's id is always the gateway's own: a client's id may be reused by anyone
        log_id = request_id if client_id is None else request.app[STATE].new_request_id()
        request_log.offer(
            entry_of(
                record,
                log_id=log_id,
                client_request_id=client_id,
                method=request.method,
                status=status,
                duration=duration,
                ttft=ttft,
                bodies=self.bodies,
                secrets=self.secrets,
            )
        )

    def _content(self, request: web.Request, record: RequestRecord, trace: RequestTrace) -> None:
        raw = request.get(RAW_BODY)
        if raw:
            trace.prompt(redact(raw.decode("utf-8", "replace"), self.secrets))
        answer = record.response_body
        if isinstance(answer, StreamAccumulator):
            choice = answer.choices.get(0)
            if choice is not None:
                trace.completion(redact("".join(choice.content), self.secrets))
        elif isinstance(answer, bytes):
            trace.completion(redact(answer.decode("utf-8", "replace"), self.secrets))


def observed_answer(record: RequestRecord, outcome: StreamOutcome) -> None:
    """What the request log keeps of a chat answer: its finish reason, and what its body is
    made from (the stream's accumulator, or the unary body)."""
    accumulator = outcome.accumulator
    if accumulator is not None:
        choice = accumulator.choices.get(0)
        record.finish_reason = choice.finish_reason if choice is not None else None
        record.response_body = accumulator
        return
    response = outcome.response
    if isinstance(response, web.Response) and isinstance(response.body, bytes):
        body = record.response_body = response.body
        try:
            decoded = _finish_decoder.decode(body)
        except msgspec.DecodeError:
            return
        if decoded.choices:
            record.finish_reason = decoded.choices[0].finish_reason
        else:
            record.finish_reason = decoded.stop_reason


OBSERVERS = web.AppKey("observers", Observers)
