"""A stream's recovery after content (models[].recovery: continue): the actor's side of
stream/continuation.py. It decides whether a break can be continued, keeps what the broken
attempts said and used, tells the attempt runner which targets may continue the stream
(`takes`), and counts how each broken stream ended (gateway_recoveries_total).
"""

from __future__ import annotations

from typing import Any

from gateway.accounting.usage import streamed_chars
from gateway.accounting.usage import tokens_of_chars
from gateway.config import Recovery
from gateway.errors import UpstreamError
from gateway.providers.base import StreamTranslator
from gateway.routing.router import Attempt
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.continuation import Continuation
from gateway.stream.continuation import JoinedTranslator
from gateway.stream.continuation import add_usage
from gateway.stream.continuation import continuable
from gateway.stream.served import ChatJob
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Usage


class StreamRecovery:
    """One stream's continuations; `model` is the client's (the metric's label)."""

    __slots__ = (
        "_broke_at",
        "_chars_before",
        "_emulated",
        "_prompt_tokens",
        "_settings",
        "estimated",
        "joined",
        "model",
        "resumed",
        "usage",
    )

    def __init__(
        self, settings: Recovery, model: str, *, prompt_tokens: int, emulated: bool
    ) -> None:
        self._settings = settings
        self.model = model
        self._prompt_tokens = prompt_tokens
        self._emulated = emulated  # emulated tool calls are parsed from the text: no join
        self.resumed: Continuation | None = None
        self.joined: JoinedTranslator | None = None  # the continuing attempt's
        self.usage: Usage | None = None  # the broken attempts', summed
        self.estimated = False
        self._broke_at = ""  # the provider whose stream broke first
        self._chars_before = 0  # output the stream had when the current attempt began

    @classmethod
    def of(cls, job: ChatJob) -> StreamRecovery | None:
        """The recovery of a stream whose model continues answers; None when it does not."""
        settings = job.recovery
        if settings is None or settings.mode != "continue":
            return None
        return cls(
            settings,
            job.request.model,
            prompt_tokens=job.prompt_tokens,
            emulated=job.tool_emulation is not None,
        )

    @staticmethod
    def takes(attempt: Attempt) -> bool:
        """True when `attempt`'s upstream can continue an answer."""
        return attempt.api == "chat" and attempt.adapter.prefill_mode(attempt.model) is not None

    def mid_answer(self) -> bool:
        """False when a continuing attempt failed before any of its output joined the
        stream (an error status, a reset, a timeout before its answer, or nothing for the
        client yet): that is one more attempt, not another break."""
        return self.resumed is None or (self.joined is not None and self.joined.joined)

    def broke(self, err: UpstreamError, acc: StreamAccumulator, attempt: Attempt) -> bool:
        """The stream broke after content: True when it is to be continued (the runner
        then moves on to a target that `takes` it), False when it ends here."""
        continuation = self.resumed
        if continuation is None:
            self._broke_at = attempt.provider.name
        if self._emulated or not continuable(acc):
            # (a continued stream that breaks where it cannot go on failed to recover)
            self._count(attempt, "not_continuable" if continuation is None else "failed")
            return False
        if continuation is not None and continuation.breaks >= self._settings.max_continuations:
            self._count(attempt, "failed")
            return False
        self.usage = add_usage(self.usage, self._attempt_usage(acc))
        if continuation is None:
            self.resumed = Continuation(acc, err)
        else:
            continuation.broke(acc)
        err.retryable = True  # another target may well finish the answer
        return True

    def failed(self, attempt: Attempt | None) -> UpstreamError:
        """No attempt continued the stream: the first break's error, counted."""
        assert self.resumed is not None
        self._count(attempt, "failed")
        return self.resumed.error

    def attempt(self, acc: StreamAccumulator) -> None:
        """A continuing attempt begins: what `acc` holds of usage is the broken ones'."""
        acc.usage = acc.usage_chunk = None
        self._chars_before = streamed_chars(acc)
        self.joined = None  # until its answer starts

    def request(
        self, attempt: Attempt, request: ChatRequest, body: dict[str, Any]
    ) -> tuple[ChatRequest, dict[str, Any]]:
        assert self.resumed is not None
        mode = attempt.adapter.prefill_mode(attempt.model)
        assert mode is not None
        return self.resumed.request(request, body, mode)

    def translator(self, attempt: Attempt, inner: StreamTranslator) -> StreamTranslator:
        assert self.resumed is not None
        mode = attempt.adapter.prefill_mode(attempt.model)
        assert mode is not None
        joined = self.joined = self.resumed.translator(inner, mode)
        return joined

    def recovered(self, acc: StreamAccumulator, attempt: Attempt) -> Usage | None:
        """The continued stream finished: its usage (every attempt's, summed) is set on
        `acc`, for the usage chunk and for accounting."""
        usage = acc.usage
        if usage is None:
            usage = self._attempt_usage(acc)
        acc.usage = total = add_usage(self.usage, usage)
        acc.usage_chunk = None
        self._count(attempt, "recovered")
        return total

    def _attempt_usage(self, acc: StreamAccumulator) -> Usage:
        """What the current attempt used: the upstream's count as far as it came, its
        output at least what it streamed (an estimate when the count is short of that)."""
        output = tokens_of_chars(streamed_chars(acc) - self._chars_before)
        known = acc.usage
        prompt = known.prompt_tokens if known is not None and known.prompt_tokens else 0
        completion = known.completion_tokens if known is not None else 0
        if not prompt or completion < output:
            self.estimated = True
        prompt = prompt or self._prompt_tokens
        completion = max(completion, output)
        return Usage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )

    def _count(self, attempt: Attempt | None, result: str) -> None:
        if attempt is not None:
            attempt.metrics.recovery_for(self.model, self._broke_at, result).inc()
