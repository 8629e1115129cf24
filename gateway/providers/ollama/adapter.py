"""Ollama's native chat API (`POST /api/chat`), streamed (NDJSON) and not. Sans-IO.

Request translation lives in `ollama_request.py`. This module owns the way back:
- the stream (`application/x-ndjson`: one `ChatResponse` per line) becomes canonical chat
  chunks: `message.content` as content, `message.thinking` as reasoning_content. Tool
  calls arrive whole, each becoming one tool-call delta without an index (the stream's
  accumulator counts the calls; the server's `function.index` is only a hint, and older
  servers leave it out) and whose id is the server's `id`, else one minted from the
  request id. The `done: true` line carries `done_reason` ("stop" even when the turn
  called tools) and the counters: it becomes the finish and the usage chunk;
- a bare `{"error": "..."}` line inside the 200 stream becomes an `UpstreamStreamError`;
- a non-streaming answer (one `ChatResponse`) becomes one `chat.completion`;
- an HTTP error answer `{"error": "..."}` becomes an `UpstreamError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config_base import effective_base_url
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.providers.base import AdapterDefaults
from gateway.providers.base import Translated
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.providers.base import UpstreamRequest
from gateway.providers.base import context_window_error
from gateway.providers.base import excerpt_error
from gateway.providers.base import status_error
from gateway.providers.ollama.config import OllamaProvider
from gateway.providers.ollama.request import build_body
from gateway.providers.translate import ChunkTranslator
from gateway.providers.translate import answer_message
from gateway.providers.translate import chat_finish
from gateway.providers.translate import one_choice
from gateway.wire import DECODE_ERRORS
from gateway.wire import ollama as o
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionCall
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import ToolCall
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_chat import encoder


def finish_reason(done_reason: str, made_calls: bool) -> str:
    """Ollama's done_reason as an OpenAI finish_reason ("stop" even when it called tools)."""
    return chat_finish("length" if done_reason == "length" else "stop", made_calls)


def usage_of(response: o.ChatResponse) -> Usage:
    prompt = response.prompt_eval_count
    completion = response.eval_count
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


def decode_response(data: bytes) -> o.ChatResponse:
    try:
        return o.response_decoder.decode(data)
    except DECODE_ERRORS as exc:
        raise UpstreamProtocolError(f"upstream sent a malformed response: {exc}") from None


def error_message(error: Any) -> str:
    if isinstance(error, str):
        return error
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return encoder.encode(error).decode()


def arguments_json(arguments: Any) -> str:
    """The call's arguments object as compact JSON; `{}` when there are none."""
    if isinstance(arguments, str):
        return arguments if arguments.strip() else "{}"
    if not arguments:
        return "{}"
    return encoder.encode(arguments).decode()


def call_id(call: o.ToolCall, request_id: str, index: int) -> str:
    if isinstance(call.id, str) and call.id:
        return call.id
    return f"call_{request_id}_{index}"


class OllamaStreamTranslator(ChunkTranslator):
    """Ollama NDJSON lines to canonical chunks for one stream."""

    __slots__ = ("_calls", "_request_id", "_started")

    def __init__(self, call: UpstreamCall) -> None:
        super().__init__(id="chatcmpl-" + call.request_id, created=call.created, model=call.model)
        self._request_id = call.request_id
        # calls seen, for the id `call_<request>_<n>` of a call the server gave none (the
        # client's tool-call index is the accumulator's count)
        self._calls = 0
        self._started = False

    def feed(self, frame: bytes) -> list[Translated]:
        if self.done or not frame.strip():
            return []
        line = decode_response(frame)
        if line.error is not UNSET and line.error is not None:
            raise UpstreamStreamError(
                error_message(line.error) or "the upstream reported an error mid-stream"
            )
        out: list[Translated] = []
        if not self._started:
            self._started = True
            out.append(self._chunk(Delta(role="assistant", content="")))
        message = line.message
        if message is not UNSET:
            if message.thinking:
                out.append(self._chunk(Delta(reasoning_content=message.thinking)))
            if message.content:
                out.append(self._chunk(Delta(content=message.content)))
            for tc in message.tool_calls or ():
                delta = ToolCallDelta(
                    id=call_id(tc, self._request_id, self._calls),
                    type="function",
                    function=FunctionDelta(
                        name=tc.function.name, arguments=arguments_json(tc.function.arguments)
                    ),
                )
                out.append(self._chunk(Delta(tool_calls=[delta])))
                self._calls += 1
        if line.done:
            self.done = True
            out.append(self._chunk(Delta(), finish_reason(line.done_reason, self._calls > 0)))
            out.append(self._usage_chunk(usage_of(line)))
        return out

    def close(self) -> list[Translated]:
        """Nothing is held back: the `done` line already finished the stream."""
        return []


def completion_of(call: UpstreamCall, response: o.ChatResponse) -> ChatCompletion:
    """A non-streaming `/api/chat` answer as one `chat.completion`."""
    message = response.message
    text = ""
    thinking = ""
    calls: list[ToolCall] = []
    if message is not UNSET:
        text = message.content
        thinking = message.thinking
        for tc in message.tool_calls or ():
            index = len(calls)
            calls.append(
                ToolCall(
                    id=call_id(tc, call.request_id, index),
                    function=FunctionCall(
                        name=tc.function.name, arguments=arguments_json(tc.function.arguments)
                    ),
                )
            )
    out = answer_message([text] if text else [], [thinking] if thinking else [], calls)
    return one_choice(
        call, out, finish_reason(response.done_reason, bool(calls)), usage_of(response)
    )


# with a context shorter than the prompt and truncation off, "exceeds the context length"
OLLAMA_CONTEXT = ("context length", "context window")


def error_from_body(status: int, body: bytes) -> UpstreamError:
    """Map Ollama's `{"error": "..."}`; anything else keeps a short excerpt of the body."""
    try:
        error = o.response_decoder.decode(body).error
    except DECODE_ERRORS:
        error = UNSET
    if error is UNSET or error is None:
        return excerpt_error(status, body)
    return status_error(status, error_message(error))


class OllamaAdapter(AdapterDefaults):
    """The `ollama` kind: Ollama's native `/api/chat` at `base_url` (localhost:11434 by
    default). A key, when configured, is sent as a bearer token (for a proxy in front)."""

    framing = "ndjson"

    def __init__(self, provider: OllamaProvider) -> None:
        self._url = effective_base_url(provider) + "/api/chat"

    def build_request(self, call: UpstreamCall) -> UpstreamRequest:
        headers = {"Content-Type": "application/json"}
        if call.stream:
            headers["Accept"] = "application/x-ndjson"
        if call.key is not None and call.key.key:
            secret = call.key.key.reveal()
            if secret:
                headers["Authorization"] = "Bearer " + secret
        return UpstreamRequest(url=self._url, headers=headers, body=build_body(call))

    def translator(self, call: UpstreamCall) -> OllamaStreamTranslator:
        return OllamaStreamTranslator(call)

    def unary_result(self, call: UpstreamCall, body: bytes) -> UnaryResult:
        response = decode_response(body)
        if response.error is not UNSET and response.error is not None:
            raise UpstreamStreamError(error_message(response.error))
        completion = completion_of(call, response)
        return UnaryResult(
            body=encoder.encode(completion), usage=usage_of(response), model=call.model
        )

    def error_from_response(
        self, status: int, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamError:
        return context_window_error(error_from_body(status, body), OLLAMA_CONTEXT)
