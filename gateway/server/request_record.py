"""What a request's `RequestRecord` (gateway/observability/access.py) learns as it is served:
the caller's name, and from the actor's outcome and the settled usage the provider, attempts,
usage, cost, the time of the first token and the gateway's own time (`overhead_s`: request
received -> the actor starts, plus the actor's time before each upstream request and
processing what came back). Shared by the chat-shaped routes (inference.py) and embeddings.
"""

from __future__ import annotations

from gateway.accounting.service import Principal
from gateway.accounting.service import Settled
from gateway.observability.access import RequestRecord
from gateway.server.observers import observed_answer
from gateway.stream.served import StreamOutcome
from gateway.wire.openai_chat import CompletionTokensDetails
from gateway.wire.openai_chat import PromptTokensDetails
from gateway.wire.openai_chat import Usage

CLIENT_TOO_SLOW = 408  # how the metrics count a stream ended for a client that did not read


def key_name(principal: Principal) -> str | None:
    """How the access log names the caller before the store has been asked."""
    if principal.static is not None:
        return principal.static.name
    return "master" if principal.kind == "master" else None


def observed(record: RequestRecord, outcome: StreamOutcome, started: float) -> None:
    record.attempts = outcome.attempts
    attempt = outcome.attempt
    if attempt is not None:
        record.provider, record.upstream_model = attempt.provider.name, attempt.model
        record.first_token_at = outcome.first_token_at
        record.overhead_s = started - record.received + outcome.gateway_s
        failed = outcome.stream_error
        if failed is not None:
            record.failed_status, record.error = failed.status, failed.code or failed.type
            record.error_message = failed.message
    if outcome.client_too_slow:
        # the client stopped reading: its failure, not the upstream's
        record.failed_status, record.error = CLIENT_TOO_SLOW, "client_write_timeout"
    if record.kept:  # the request log or tracing is on: what else they keep
        observed_answer(record, outcome)


def record_usage(record: RequestRecord | None, usage: Usage, settled: Settled) -> None:
    if record is None:
        return
    record.input_tokens = max(usage.prompt_tokens, 0)
    record.output_tokens = max(usage.completion_tokens, 0)
    details = usage.prompt_tokens_details
    cached = details.cached_tokens if isinstance(details, PromptTokensDetails) else None
    record.cached_tokens = cached if isinstance(cached, int) else 0
    record.cost_usd = settled.cost_nanos / 1e9
    if record.kept:
        completion = usage.completion_tokens_details
        if isinstance(completion, CompletionTokensDetails):
            reasoning = completion.reasoning_tokens
            record.reasoning_tokens = reasoning if isinstance(reasoning, int) else None
