"""The attempt runner: the one loop every upstream call goes through (chat streams, unary
chat answers, embeddings, count_tokens).

For each attempt of the router's plan, while the request's deadline has not passed:

1. key: `health.begin` (a key resting, out of rotation or already probed since the plan was
   drawn is skipped); the step may refuse the target (`Step.refuses`: a `ClientError` such
   as token ids to a text-only embeddings model), which releases the key and moves on
   without counting an attempt;
2. counted (`attempts`, the retry/failover metrics);
3. credential: the step's `TokenSource` (declared by the adapter: a service-account file,
   a cloud identity) fetched through the process's `AccessTokens`; a source that cannot
   give one fails the attempt like a key that is down (its circuit opens at once);
4. the step's request, under the shared alarm clock (`alarm`, `bounded`): no
   `asyncio.timeout` on these paths;
5. key health told how it ended (`report_success` / `report_failure`, or released when the
   client left);
6. every credential of the attempt (the key's secrets and the fetched credential's) cut out
   of its error before anyone sees it (`hide`);
7. a retryable failure moves on to the next attempt (a transient one may first be tried
   again on the same target: `retries`); a context-length error moves on only to targets
   with a larger context window (`wider`); a stream continued after content (`resuming`)
   moves on past any failure, to the targets that can continue it; when none is left,
   `final_error`.

The runner holds only what the loop needs (the current attempt, its credential, the count);
what a step makes of an attempt is the step's own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any
from typing import Protocol
from typing import TypeVar

import msgspec

from gateway.errors import ClientError
from gateway.errors import GatewayError
from gateway.errors import NoUpstreamAvailable
from gateway.errors import UpstreamError
from gateway.observability.request_entry import AttemptEntry
from gateway.providers.base import Credential
from gateway.providers.base import NativeRequest
from gateway.providers.base import TokenSource
from gateway.providers.base import UpstreamCall
from gateway.providers.base import hide_credentials
from gateway.routing.balancer import unavailable
from gateway.routing.health import REFUSED
from gateway.routing.router import Attempt
from gateway.upstream.alarm import Alarm
from gateway.upstream.credentials import AccessTokens
from gateway.upstream.http_client import HttpPool
from gateway.upstream.outcome import count_move
from gateway.upstream.outcome import error_kind
from gateway.upstream.outcome import final_error
from gateway.upstream.outcome import report_failure
from gateway.upstream.outcome import report_success
from gateway.upstream.retries import NO_RETRIES
from gateway.upstream.retries import RetryPolicy
from gateway.upstream.retries import retry_wait
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Usage

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
E = TypeVar("E", bound=GatewayError)


# (the attempt that answered a context-length error, the rest of the plan, attempts made)
# -> what to try instead (Router.wider, bound to the client's model)
Wider = Callable[[Attempt, list[Attempt], int], list[Attempt]]


class Ended(msgspec.Struct, frozen=True, gc=False):
    """How an attempt that returned a result ended, for its key's health."""

    failure: UpstreamError | None = None  # a committed stream that failed after its start
    released: bool = False  # the client left (or shutdown): says nothing about the key
    first_byte_at: float = 0.0  # loop time of the first upstream byte (0: none)
    usage: Usage | None = None  # what the key served, for its token rate


class AttemptTracer(Protocol):
    """A request's trace, told of each attempt (gateway/observability/tracing.py)."""

    def attempt_started(self, attempt: Attempt) -> str | None:
        """The attempt's span begins; the `traceparent` its upstream request carries."""
        ...

    def attempt_ended(self, status: int | None, error: str | None) -> None: ...


def key_label(attempt: Attempt) -> str:
    """How the request log names an attempt's key: its name, else `#N` (its index)."""
    key = attempt.key
    if key is None:
        return "-"
    if key.name:
        return key.name
    for index, other in enumerate(attempt.provider.keys):
        if other is key:
            return f"#{index}"
    return "#?"


class Step(Protocol[T_co]):
    """What one kind of upstream call does within an attempt."""

    def refuses(self, attempt: Attempt) -> None:
        """Raise a `ClientError` if this target cannot take the request (checked before the
        attempt counts and before any credential is fetched)."""
        ...

    def token_source(self, attempt: Attempt) -> TokenSource | None: ...

    def send(self, attempt: Attempt) -> Awaitable[T_co]:
        """The attempt's request and its answer; raises `UpstreamError` when it failed."""
        ...

    def ended(self) -> Ended:
        """How the attempt that `send` just returned from ended."""
        ...


class AttemptRunner:
    """One request's attempts through its plan; see the module docstring."""

    __slots__ = (
        "alarm",
        "attempt",
        "attempts",
        "deadline",
        "journal",
        "loop",
        "model",
        "noting",
        "plan",
        "pool",
        "refusals",
        "resuming",
        "retries",
        "started",
        "token",
        "tokens",
        "traceparent",
        "tracer",
        "wider",
    )

    def __init__(
        self,
        *,
        plan: list[Attempt],
        model: str,
        deadline_s: float,
        pool: HttpPool,
        tokens: AccessTokens,
        refusals: bool = False,
        journal: list[AttemptEntry] | None = None,
        tracer: AttemptTracer | None = None,
        retries: RetryPolicy = NO_RETRIES,
        wider: Wider | None = None,
    ) -> None:
        self.plan = plan
        self.retries = retries
        self.wider = wider  # context-window fallbacks (Router.wider); None: none
        self.model = model  # the client's model name (the failover metric's label)
        self.loop = loop = asyncio.get_running_loop()
        self.deadline = loop.time() + deadline_s  # loop time: the whole request's deadline
        self.pool = pool  # the upstream connections (and the alarm clock) of this process
        self.tokens = tokens
        self.alarm = Alarm(pool.clock)  # the deadline of whatever the attempt waits for
        # `refusals`: a ClientError from a target moves on to the next one (embeddings:
        # a target that cannot take the input); otherwise it is the request's answer
        self.refusals = refusals
        self.attempts = 0
        self.attempt: Attempt | None = None  # the current (at the end: the last) attempt
        self.token: Credential | None = None  # the current attempt's fetched credential
        self.started = 0.0  # loop time the current attempt began
        # What the request log and traces learn of each attempt; None (the default): nothing
        # is recorded, and an attempt costs no more than without them.
        self.journal = journal
        self.tracer = tracer
        self.noting = journal is not None or tracer is not None  # one test per attempt end
        self.traceparent: str | None = None  # the current attempt's, for its upstream request
        # Set by a stream being continued after content (stream/continuation.py): only the
        # targets it accepts are tried, and a refusal (a 4xx: a rejected prefill) moves on
        # to the next instead of ending the request.
        self.resuming: Callable[[Attempt], bool] | None = None

    def call(
        self,
        attempt: Attempt,
        request: ChatRequest,
        body: dict[str, Any],
        *,
        stream: bool,
        request_id: str,
        created: int = 0,
        native: NativeRequest | None = None,
    ) -> UpstreamCall:
        """What the attempt's adapter builds its request from: the client's request, the
        attempt's provider, key, upstream model and API, the credential fetched for it, and the
        time to sign with (read here: adapters read no clock)."""
        return UpstreamCall(
            request=request,
            body=body,
            provider=attempt.provider,
            key=attempt.key,
            model=attempt.model,
            stream=stream,
            request_id=request_id,
            created=created,
            now=time.time(),
            credential=self.token,
            api=attempt.api,
            native=native,
        )

    def served_headers(self) -> dict[str, str]:
        """What the client is told of the attempts: the served (or last) provider and
        upstream model, and how many attempts were made."""
        headers = {"x-gateway-attempts": str(self.attempts)}
        attempt = self.attempt
        if attempt is not None:
            headers["x-gateway-provider"] = attempt.provider.name
            headers["x-gateway-model"] = attempt.model
        return headers

    def hide(self, err: E) -> E:
        """`err` with the current attempt's credentials (key secrets, fetched credential) cut
        out."""
        attempt = self.attempt
        return hide_credentials(err, attempt.key if attempt else None, self.token)

    def until(self, timeout_s: float) -> float:
        """Loop time `timeout_s` from now, or the request's deadline if that comes first."""
        return min(self.loop.time() + timeout_s, self.deadline)

    async def bounded(
        self, work: Awaitable[T], timeout_s: float, timed_out: Callable[[], UpstreamError]
    ) -> T:
        """Await `work` under the alarm, at most `timeout_s` (and within the request's
        deadline); past it, `work` is cancelled and `timed_out()` raised."""
        alarm = self.alarm
        alarm.arm(self.until(timeout_s))
        try:
            return await work
        except asyncio.CancelledError:
            if not alarm.expired():
                raise
            raise timed_out() from None
        finally:
            alarm.disarm()

    async def run(self, step: Step[T]) -> T:
        """The first attempt's result that did not fail; the request's error otherwise."""
        errors: list[UpstreamError] = []
        refused: ClientError | None = None
        skipped: list[tuple[float, bool]] = []
        previous: Attempt | None = None
        loop = self.loop
        plan, at = self.plan, 0
        retried: dict[tuple[str, str], int] = {}
        while at < len(plan):
            attempt = plan[at]
            at += 1
            started = loop.time()
            if started >= self.deadline:
                break
            resuming = self.resuming
            if resuming is not None and not resuming(attempt):
                continue
            health = attempt.health
            now = time.monotonic()
            # The plan was drawn before earlier attempts ran: a key may have become
            # unavailable since, and a half-open key admits only its one probe.
            ticket = health.begin(now, attempt.model)
            if ticket == REFUSED:
                skipped.append(health.refusal(now, attempt.model))
                continue
            if self.refusals:
                try:
                    step.refuses(attempt)
                except ClientError as err:
                    health.released(ticket)
                    refused = refused or err
                    continue
            if previous is not None:
                count_move(previous, attempt, self.model)
            previous = attempt
            self.attempts += 1
            self.attempt, self.token, self.started = attempt, None, started
            if self.tracer is not None:
                self.traceparent = self.tracer.attempt_started(attempt)
            try:
                source = step.token_source(attempt)
                if source is not None:
                    self.token = await self.tokens.credential(source)
                result = await step.send(attempt)
            except UpstreamError as err:
                report_failure(attempt, ticket, self.hide(err))
                if self.noting:
                    self._noted(attempt, err.upstream_status, error_kind(err))
                errors.append(err)
                if err.context_exceeded and self.wider is not None:
                    # only a larger context window may take it (the rest of the plan is cut)
                    plan = plan[:at] + self.wider(attempt, plan[at:], self.attempts)
                    continue
                if not err.retryable and self.resuming is None:
                    break
                wait = retry_wait(self.retries, err, attempt, plan[at:], retried)
                if wait is not None and loop.time() + wait < self.deadline:
                    await asyncio.sleep(wait)  # the client leaving cancels it
                    at -= 1  # the same attempt again
                continue
            except ClientError as err:
                health.released(ticket)
                if self.noting:
                    self._noted(attempt, err.status, err.code or "refused")
                if not self.refusals:
                    raise
                refused = refused or err  # this target cannot take the request: the next may
                continue
            except BaseException:
                health.released(ticket)
                if self.noting:
                    self._noted(attempt, None, "cancelled")
                raise
            ended = step.ended()
            self._report(attempt, ticket, ended)
            if self.noting:
                self._noted_end(attempt, ended)
            return result
        if errors:
            raise final_error(errors)
        if refused is not None:
            raise refused
        if skipped:
            raise unavailable(self.model, skipped)
        raise NoUpstreamAvailable("no upstream target could be tried for this model")

    def _noted_end(self, attempt: Attempt, ended: Ended) -> None:
        failure = ended.failure
        if failure is not None:
            self._noted(attempt, failure.upstream_status, error_kind(failure))
        elif ended.released:
            self._noted(attempt, None, "client_closed")
        else:
            self._noted(attempt, 200, None)  # the upstream answered with a success

    def _noted(self, attempt: Attempt, status: int | None, error: str | None) -> None:
        """The attempt's end, told to the journal and the tracer."""
        seconds = self.loop.time() - self.started
        if self.journal is not None:
            self.journal.append(
                AttemptEntry(
                    provider=attempt.provider.name,
                    key=key_label(attempt),
                    model=attempt.model,
                    started=time.time() - seconds,
                    seconds=round(seconds, 6),
                    status=status,
                    error=error,
                )
            )
        if self.tracer is not None:
            self.tracer.attempt_ended(status, error)

    def _report(self, attempt: Attempt, ticket: int, ended: Ended) -> None:
        if ended.failure is not None:
            report_failure(attempt, ticket, ended.failure)
        elif ended.released:
            attempt.health.released(ticket)
        else:
            ttft = ended.first_byte_at - self.started if ended.first_byte_at else None
            report_success(attempt, ticket, ttft, ended.usage)
