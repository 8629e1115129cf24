"""What every provider adapter offers the actor, and the values passed between them.

An adapter is sans-IO: it builds the upstream request (URL, headers, body bytes), makes a
translator that turns decoded upstream frames into canonical chat chunks, and maps an
upstream error answer to an `UpstreamError`. The actor does all the IO. This package must
not import asyncio or aiohttp.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import Literal
from typing import Protocol
from typing import TypeVar
from urllib.parse import quote
from urllib.parse import unquote

import msgspec

from gateway.config_base import Egress
from gateway.config_base import ProviderBase
from gateway.config_base import ProviderKey
from gateway.errors import BadRequest
from gateway.errors import GatewayError
from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStatusError
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Usage


class NativeRequest(msgspec.Struct, frozen=True):
    """The client's request in its own API, for an upstream that speaks that API too (a
    Responses client in front of an `api: responses` target, a Messages client in front of
    Anthropic): forwarded, not translated."""

    api: str  # "responses" | "messages"
    body: dict[str, Any]
    headers: dict[str, str] = {}  # client headers that belong to that API (anthropic-beta)


class ResetHeaders(msgspec.Struct, frozen=True):
    """A family of rate-limit headers an upstream sends: per limit (`requests`, `tokens`...)
    a `remaining` count and when it resets (`reset` names with `{}` for the limit), the
    reset given as a duration ("6m0s", "20ms") or as an RFC 3339 time."""

    remaining: str
    reset: str
    limits: tuple[str, ...]
    form: Literal["duration", "time"]


class UpstreamCall(msgspec.Struct, kw_only=True):
    """One attempt at one target: everything an adapter needs to build its request."""

    request: ChatRequest  # the client's request, typed
    body: dict[str, Any]  # the client's request as it sent it (unknown fields included)
    provider: ProviderBase
    key: ProviderKey | None
    model: str  # the upstream model id
    stream: bool  # whether the upstream is asked to stream
    request_id: str
    created: int = 0  # unix seconds when the request arrived (sans-IO: passed in)
    now: float = 0.0  # unix seconds of this attempt, read by the caller, for request signing
    credential: Credential | None = None  # what the adapter's `token_source` yielded, fetched
    api: str = "chat"  # the target's upstream API: "chat" | "responses" (openai, azure)
    native: NativeRequest | None = None  # set when the upstream speaks the client's API


class Credential(msgspec.Struct, frozen=True, kw_only=True):
    """What a `TokenSource` yields: a bearer token or AWS credentials, and when it expires
    (unix seconds). Its repr shows no secret; `secrets()` is what errors must never show."""

    expires_at: float

    def secrets(self) -> tuple[str, ...]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(expires_at={self.expires_at!r}, ***)"


class BearerToken(Credential, frozen=True, kw_only=True):
    """An OAuth access token (Google, Microsoft Entra ID), sent as `Authorization: Bearer`."""

    token: str
    quota_project: str | None = None  # Google: the project billed (`x-goog-user-project`)

    def secrets(self) -> tuple[str, ...]:
        return (self.token,)


class AwsCredentials(Credential, frozen=True, kw_only=True):
    """Temporary (or static) AWS credentials that sign a request with SigV4."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None  # sent as X-Amz-Security-Token

    def secrets(self) -> tuple[str, ...]:
        found = (self.access_key_id, self.secret_access_key, self.session_token)
        return tuple(s for s in found if s)


def bearer_token(credential: Credential | None, what: str) -> BearerToken:
    """`credential` as a bearer token, or the error of an attempt that has none (`what`
    names the credential in it)."""
    if not isinstance(credential, BearerToken) or not credential.token:
        raise UpstreamConnectError(f"no access token for {what}")
    return credential


class TokenSource(msgspec.Struct, frozen=True):
    """How an attempt's credential is obtained: a sans-IO description an adapter returns
    from `token_source(key)`, fetched (and cached, and refreshed) by upstream/credentials.py,
    which maps each source type to its fetcher. The `Credential` reaches the adapter as
    `credential`, and its secrets are redacted from every error of the attempt like the
    key's."""

    def label(self) -> str:
        """What the source is called in an error message (never a secret)."""
        raise NotImplementedError


class GoogleServiceAccount(TokenSource, frozen=True):
    """An OAuth token for a Google service-account credentials file (scope cloud-platform)."""

    key_file: str  # the service-account JSON key file

    def label(self) -> str:
        return "the credentials in " + self.key_file.rsplit("/", 1)[-1]


def no_token_source(self: object, key: ProviderKey | None) -> TokenSource | None:
    """`token_source` of an adapter whose keys are sent as they are."""
    return None


class UpstreamRequest(msgspec.Struct, kw_only=True):
    """An HTTP request to send, or, for the in-process mock, a recorded stream to play back."""

    url: str
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    body: bytes = b""
    method: str = "POST"
    playback: list[bytes] | None = None  # set by the mock: frames to yield instead of HTTP
    playback_delay_s: float = 0.0
    # the provider's proxy and TLS trust (`ProviderBase.egress`); None: the environment's
    egress: Egress | None = None


class TokenCount(msgspec.Struct, frozen=True):
    """How an adapter counts a request's input tokens upstream: the request to send and how
    to read the number from its answer (raising `UpstreamProtocolError` if it cannot)."""

    request: UpstreamRequest
    read: Callable[[bytes], int]


def cannot_count_tokens(self: object, call: UpstreamCall) -> TokenCount | None:
    """`count_tokens` of an adapter whose upstream cannot count tokens."""
    return None


def cannot_continue(self: object, model: str) -> str | None:
    """`prefill_mode` of an adapter whose upstream cannot continue an answer it is given."""
    return None


# How an upstream takes a trailing assistant turn as the start of its answer (a stream that
# broke after content goes on there, stream/continuation.py):
PREFILL = "prefill"  # the last assistant message is the answer's start (Anthropic's prefill):
# its trailing whitespace is refused, so it is cut and dropped from the continuation's start
CONTINUE_FINAL_MESSAGE = "continue_final_message"  # vLLM/SGLang: that flag, no generation prompt
PREFIX = "prefix"  # DeepSeek, Mistral: `"prefix": true` on the last assistant message


class Translated(msgspec.Struct, gc=False):
    """A canonical chunk and, when it is the upstream's own unchanged JSON, those bytes."""

    chunk: ChatChunk
    raw: bytes | None = None


class UnaryResult(msgspec.Struct, gc=False):
    """A non-streaming upstream answer: a `chat.completion` JSON body, or, for a call with
    `native` set, the upstream's own answer in that API (`api` says which)."""

    body: bytes
    usage: Usage | None
    model: str | None
    api: str = "chat"


class StreamTranslator(Protocol):
    """Upstream frames in, canonical chunks out. `done` turns true at the upstream's end marker."""

    done: bool

    def feed(self, frame: Any) -> list[Translated]: ...

    def close(self) -> list[Translated]: ...


class ProviderAdapter(Protocol):
    """One provider kind, configured for one provider entry."""

    framing: str  # "sse" | "ndjson" | "aws-eventstream": which decoder reads the body
    native_unary: bool  # True: non-streaming requests go upstream non-streaming
    # Client APIs whose requests this adapter forwards as they are (`UpstreamCall.native`),
    # besides the target's own `api` (an `api: responses` target takes Responses clients)
    native_apis: frozenset[str]
    # the upstream's rate-limit reset headers, read when it answers 429 or 5xx
    rate_limits: tuple[ResetHeaders, ...]

    def build_request(self, call: UpstreamCall) -> UpstreamRequest: ...

    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        """The access token `key` needs fetched before a request (None: the key is sent as
        it is); raises `UpstreamConnectError` for a key that has no usable credential."""
        ...

    def count_tokens(self, call: UpstreamCall) -> TokenCount | None:
        """The upstream request that counts `call`'s input tokens; None: it cannot."""
        ...

    def translator(self, call: UpstreamCall) -> StreamTranslator: ...

    def unary_result(self, call: UpstreamCall, body: bytes) -> UnaryResult: ...

    def error_from_response(
        self, status: int, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamError: ...

    def prefill_mode(self, model: str) -> str | None:
        """How `model` upstream continues an answer from a trailing assistant turn
        (PREFILL, CONTINUE_FINAL_MESSAGE, PREFIX); None: it cannot."""
        ...


class AdapterDefaults:
    """What most adapters declare: an SSE body, non-streaming requests sent non-streaming,
    keys sent as they are, no token counting, no continuation of an answer, nothing
    forwarded natively, no rate-limit headers. An adapter subclasses it and declares only
    where its kind differs."""

    framing = "sse"
    native_unary = True
    token_source = no_token_source
    count_tokens = cannot_count_tokens
    prefill_mode = cannot_continue
    native_apis: frozenset[str] = frozenset()
    rate_limits: tuple[ResetHeaders, ...] = ()


E = TypeVar("E", bound=GatewayError)


def context_window_error(
    err: E, phrases: tuple[str, ...], codes: frozenset[str] = frozenset()
) -> E:
    """`err` marked `context_exceeded` when it is a 400/413 whose code is one of `codes` or
    whose message contains one of `phrases` (lower case): each provider names its
    context-length error its own way."""
    if isinstance(err, UpstreamError) and err.upstream_status in (400, 413):
        message = err.message.lower()
        if (err.code in codes) or any(p in message for p in phrases):
            err.context_exceeded = True
    return err


def hide_credentials(err: E, key: ProviderKey | None, credential: Credential | None = None) -> E:
    """`err` with the attempt's credentials cut out of its message. Upstreams quote the key
    they were sent in error messages (401s are reworded in `status_error`, but a proxy or an
    OpenAI-compatible server may do it in a 400, a 500 or a stream's error event), and an
    upstream's message is what the client is shown."""
    secrets = list(credential.secrets()) if credential is not None else []
    if key is not None:
        secrets += [s.reveal() for s in key.secrets()]
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        if secret in err.message:
            err.message = err.message.replace(secret, "[redacted]")
            err.args = (err.message,)
    return err


# Rounds of percent-decoding a model name is looked through: `%252e` is `.` after two;
# a name that still decodes to something else after this many is refused unread.
DECODE_ROUNDS = 4


def has_dot_segment(name: str) -> bool:
    """Whether `name`, or what it reads as after percent-decoding (up to DECODE_ROUNDS
    times), has a `.` or `..` segment between slashes (or backslashes, which some servers
    read as slashes). Servers and proxies decode `%2E%2E` and `%2F` before resolving a path,
    so an escaped dot segment can still climb out of the model's place in it."""
    text = name
    for _ in range(DECODE_ROUNDS + 1):
        if "." in text:
            if "\\" in text:
                text = text.replace("\\", "/")
            if "/" not in text:
                if text == "." or text == "..":
                    return True
            elif "." in (segments := text.split("/")) or ".." in segments:
                return True
        if "%" not in text:
            return False
        decoded = unquote(text)
        if decoded == text:
            return False
        text = decoded
    return True


def path_segment(value: str, safe: str = "") -> str:
    """`value` (a model name) URL-escaped as one segment of an upstream path. A value with a
    dot segment in it, escaped or not, is refused: escaping `..` as `%2E%2E` is not enough,
    since servers and proxies decode it back before resolving `/model/../converse` to
    `/converse`. The router refuses such client model names first; this is the backstop
    for every other way a name reaches a path."""
    if has_dot_segment(value):
        raise BadRequest(
            f"The model '{value}' is not a valid model id (a path dot segment)",
            param="model",
            code="invalid_model",
        )
    return quote(value, safe=safe)


RETRYABLE_STATUSES = frozenset({401, 403, 408, 409, 429})


def status_error(
    status: int,
    message: str,
    *,
    type: str | None = None,
    code: str | int | None = None,
    param: str | None = None,
) -> UpstreamError:
    """The error for an upstream HTTP error answer, retryable where another key or target may
    succeed (auth, rate limits, conflicts, 5xx). Other 4xx answers are the client's fault and
    keep the upstream's type, code and param so the client sees what the provider said."""
    retryable = status in RETRYABLE_STATUSES or status >= 500
    if status in (401, 403):
        # Providers quote part of the rejected key ("Incorrect API key provided: sk-ab***yz");
        # the gateway's credentials are never the client's business.
        message = f"the upstream rejected the gateway's credentials (HTTP {status})"
    err = UpstreamStatusError(
        message or f"upstream answered HTTP {status}",
        retryable=retryable,
        upstream_status=status,
        param=param,
        code=str(code) if code is not None else None,
    )
    if not retryable and type:
        err.type = type
    return err


def excerpt_error(status: int, body: bytes) -> UpstreamError:
    """The error for an answer whose body is not the provider's error shape: the status and
    a short excerpt of the body as the message."""
    text = body[:300].decode("utf-8", "replace").strip()
    return status_error(status, text or f"upstream answered HTTP {status}")


def tool_input_text(raw: bytes) -> str:
    """A tool call's input as the upstream sent it (a `msgspec.Raw`: JSON the decoder did
    not look into, so not checked for UTF-8) as text for the client."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise UpstreamProtocolError("upstream sent tool input that is not UTF-8") from None
