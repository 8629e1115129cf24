"""Google Gemini API (`generativelanguage.googleapis.com`), streamed and not. Sans-IO.

Request translation lives in `gemini_request.py`. This module owns the way back:
- the stream (`streamGenerateContent?alt=sse`: one `GenerateContentResponse` per SSE event,
  no end marker) becomes canonical chat chunks. Function calls arrive whole and without an
  id: each becomes one tool-call delta with an id minted from the request id (and no
  index: the stream's accumulator counts the calls and gives each its index).
  `finishReason` is STOP even when the turn called tools, so the finish is held until the
  stream ends, as is the usage (sent on
  every event, not monotonic: the last one counts); `close()` emits both.
- a `generateContent` answer becomes one `chat.completion`;
- an error answer `{"error": {"code", "message", "status"}}` becomes an `UpstreamError`.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config_base import ProviderKey
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.framing.sse import SSEEvent
from gateway.providers.base import AdapterDefaults
from gateway.providers.base import Credential
from gateway.providers.base import TokenSource
from gateway.providers.base import Translated
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.providers.base import UpstreamRequest
from gateway.providers.base import bearer_token
from gateway.providers.base import context_window_error
from gateway.providers.base import excerpt_error
from gateway.providers.base import path_segment
from gateway.providers.base import status_error
from gateway.providers.gemini.config import GeminiKey
from gateway.providers.gemini.config import GeminiProvider
from gateway.providers.gemini.request import build_body
from gateway.providers.gemini.request import signed_call_id
from gateway.providers.identity import GoogleIdentity
from gateway.providers.identity import configured_proxy
from gateway.providers.translate import ChunkTranslator
from gateway.providers.translate import answer_message
from gateway.providers.translate import chat_finish
from gateway.providers.translate import one_choice
from gateway.wire import DECODE_ERRORS
from gateway.wire import gemini as g
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import CompletionTokensDetails
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionCall
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import PromptTokensDetails
from gateway.wire.openai_chat import ToolCall
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_chat import encoder

# error statuses (google.rpc.Code names) a moment later may not repeat; not RESOURCE_EXHAUSTED
TRANSIENT_STATUSES = frozenset({"UNAVAILABLE", "INTERNAL"})
# "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576)."
GEMINI_CONTEXT = ("exceeds the maximum number of tokens",)
FILTERED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)


def finish_reason(reason: str, made_calls: bool) -> str:
    """Gemini's finishReason as an OpenAI finish_reason (STOP even when it called tools)."""
    if reason == "MAX_TOKENS":
        return chat_finish("length", made_calls)
    return chat_finish("content_filter" if reason in FILTERED else "stop", made_calls)


def usage_of(u: g.UsageMetadata) -> Usage:
    """Gemini usage as OpenAI usage: thinking counts as completion (and as reasoning)."""
    cached = u.cached_content_token_count
    return Usage(
        prompt_tokens=u.prompt_token_count + u.tool_use_prompt_token_count,
        completion_tokens=u.candidates_token_count + u.thoughts_token_count,
        total_tokens=u.total_token_count,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached if cached else 0),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=u.thoughts_token_count),
    )


def decode_response(data: bytes) -> g.GenerateContentResponse:
    try:
        return g.response_decoder.decode(data)
    except DECODE_ERRORS as exc:
        raise UpstreamProtocolError(f"upstream sent a malformed response: {exc}") from None


def stream_error(err: g.ApiError) -> UpstreamStreamError:
    return UpstreamStreamError(
        err.message or "the upstream reported an error mid-stream",
        code=err.status or None,
        transient=err.status in TRANSIENT_STATUSES,
    )


def arguments_json(call: g.FunctionCall) -> str:
    return encoder.encode(call.args).decode() if call.args else "{}"


def _signature(part: g.Part) -> str | None:
    signature = part.thought_signature
    return signature if signature is not UNSET and signature else None


def call_of(part: g.Part) -> tuple[str, g.FunctionCall] | None:
    """(name, call) of a real function call; None for other parts and for the empty
    `functionCall: {}` that ends Vertex's streamed partial arguments (not a new call)."""
    fc = part.function_call
    if fc is UNSET or fc.name is UNSET or not fc.name:
        return None
    return fc.name, fc


class GeminiStreamTranslator(ChunkTranslator):
    """Gemini SSE events to canonical chunks for one stream."""

    __slots__ = ("_finish", "_minted", "_request_id", "_started", "_usage")

    def __init__(self, call: UpstreamCall) -> None:
        super().__init__(id="chatcmpl-" + call.request_id, created=call.created, model=call.model)
        self._request_id = call.request_id
        # Gemini's calls come whole and without ids: the n of the id `call_<request>_<n>`
        # minted for each (the client's tool-call index is the accumulator's count)
        self._minted = 0
        self._started = False
        self._finish: str | None = None  # Gemini's finishReason, once seen
        self._usage: g.UsageMetadata | None = None

    def feed(self, frame: SSEEvent) -> list[Translated]:
        data = frame.data
        if not data.strip():
            return []
        event = decode_response(data)
        if event.error is not UNSET:
            raise stream_error(event.error)
        if event.usage_metadata is not UNSET:
            self._usage = event.usage_metadata
        if event.model_version:
            self._model = event.model_version
        out: list[Translated] = []
        if not self._started:
            self._started = True
            out.append(self._chunk(Delta(role="assistant", content="")))
        feedback = event.prompt_feedback
        if feedback is not UNSET and feedback.block_reason and not event.candidates:
            self._finish = "SAFETY"  # the prompt was blocked: no candidate will come
        for candidate in event.candidates[:1]:
            content = candidate.content
            if content is not UNSET:
                for part in content.parts:
                    item = self._part(part)
                    if item is not None:
                        out.append(item)
            if candidate.finish_reason:
                self._finish = candidate.finish_reason
        return out

    def _part(self, part: g.Part) -> Translated | None:
        named = call_of(part)
        if named is not None:
            name, fc = named
            minted = f"call_{self._request_id}_{self._minted}"
            self._minted += 1
            delta = ToolCallDelta(
                id=signed_call_id(minted, _signature(part)),
                type="function",
                function=FunctionDelta(name=name, arguments=arguments_json(fc)),
            )
            return self._chunk(Delta(tool_calls=[delta]))
        text = part.text
        if text is UNSET or not text:
            return None
        if part.thought:
            return self._chunk(Delta(reasoning_content=text))
        return self._chunk(Delta(content=text))

    def close(self) -> list[Translated]:
        """The stream ended (it has no end marker): the finish and the usage chunks."""
        out: list[Translated] = []
        if self._finish is not None:
            self.done = True
            reason = finish_reason(self._finish, self._minted > 0)
            out.append(self._chunk(Delta(), reason))
        if self._usage is not None:
            out.append(self._usage_chunk(usage_of(self._usage)))
        return out


def completion_of(call: UpstreamCall, response: g.GenerateContentResponse) -> ChatCompletion:
    """A `generateContent` answer as one `chat.completion`."""
    text: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    reason = ""
    feedback = response.prompt_feedback
    if feedback is not UNSET and feedback.block_reason and not response.candidates:
        reason = "SAFETY"
    for candidate in response.candidates[:1]:
        reason = candidate.finish_reason or ""
        parts = candidate.content.parts if candidate.content is not UNSET else []
        for part in parts:
            named = call_of(part)
            if named is not None:
                calls.append(
                    ToolCall(
                        id=signed_call_id(f"call_{call.request_id}_{len(calls)}", _signature(part)),
                        function=FunctionCall(name=named[0], arguments=arguments_json(named[1])),
                    )
                )
            elif part.text:
                (thoughts if part.thought else text).append(str(part.text))
    meta = response.usage_metadata
    usage = usage_of(meta) if meta is not UNSET else None
    message = answer_message(text, thoughts, calls)
    finish = finish_reason(reason, bool(calls))
    return one_choice(call, message, finish, usage, model=response.model_version or None)


def error_from_body(status: int, body: bytes) -> UpstreamError:
    """Map Google's error answer; anything else keeps a short excerpt of the body."""
    try:
        err = g.error_body_decoder.decode(body).error
    except DECODE_ERRORS:
        return excerpt_error(status, body)
    return status_error(status, err.message, type=err.status, code=err.status)


def bearer_headers(credential: Credential | None, what: str) -> dict[str, str]:
    """The headers of a Google OAuth token: the bearer, and the project billed for it when
    the credentials name one (user credentials from an ADC file: `x-goog-user-project`)."""
    token = bearer_token(credential, what)
    headers = {"Authorization": "Bearer " + token.token}
    if token.quota_project:
        headers["x-goog-user-project"] = token.quota_project
    return headers


def gemini_source(provider: GeminiProvider, key: ProviderKey | None) -> TokenSource | None:
    """An `identity: default` key's OAuth token (Application Default Credentials); None
    for an API key, sent as it is."""
    if isinstance(key, GeminiKey) and key.cloud_identity is not None:
        return GoogleIdentity(
            target_principal=key.impersonate,
            iam_base_url=key.iam_endpoint,
            proxy=configured_proxy(provider),
        )
    return None


def gemini_auth(call_key: ProviderKey | None, credential: Credential | None) -> dict[str, str]:
    """The Gemini API's credential headers: the API key in `x-goog-api-key`, or an
    identity key's OAuth token as a bearer."""
    if isinstance(call_key, GeminiKey) and call_key.cloud_identity is not None:
        return bearer_headers(credential, "the Google identity")
    if call_key is not None and call_key.key:
        return {"x-goog-api-key": call_key.key.reveal()}
    return {}


class GeminiAdapter(AdapterDefaults):
    """The `gemini` kind: the Gemini API at `base_url` (Google's by default), key in
    `x-goog-api-key` or, for an identity key, an OAuth token as a bearer."""

    def __init__(self, provider: GeminiProvider) -> None:
        self._provider = provider
        self._base = provider.models_url()

    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        return gemini_source(self._provider, key)

    def build_request(self, call: UpstreamCall) -> UpstreamRequest:
        model = path_segment(call.model.removeprefix("models/"), safe="-._~")
        if call.stream:
            url = self._base + model + ":streamGenerateContent?alt=sse"
        else:
            url = self._base + model + ":generateContent"
        headers = {"Content-Type": "application/json"}
        if call.stream:
            headers["Accept"] = "text/event-stream"
        headers.update(gemini_auth(call.key, call.credential))
        return UpstreamRequest(url=url, headers=headers, body=build_body(call))

    def translator(self, call: UpstreamCall) -> GeminiStreamTranslator:
        return GeminiStreamTranslator(call)

    def unary_result(self, call: UpstreamCall, body: bytes) -> UnaryResult:
        response = decode_response(body)
        if response.error is not UNSET:
            raise stream_error(response.error)
        completion = completion_of(call, response)
        usage = completion.usage if completion.usage is not UNSET else None
        return UnaryResult(body=encoder.encode(completion), usage=usage, model=completion.model)

    def error_from_response(
        self, status: int, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamError:
        return context_window_error(error_from_body(status, body), GEMINI_CONTEXT)
