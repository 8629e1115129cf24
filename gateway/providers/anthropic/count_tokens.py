"""Anthropic's `POST /v1/messages/count_tokens`: the `anthropic` kind's token-count
capability (`AnthropicAdapter.count_tokens`). Sans-IO.

The request is the Messages request the adapter would send, cut to the fields count_tokens
takes (it rejects `max_tokens`, `stream` and the sampling parameters), with the adapter's
own headers (key, version); the answer is `{"input_tokens": n}`.
"""

from __future__ import annotations

import msgspec

from gateway.errors import UpstreamProtocolError
from gateway.providers.anthropic.request import build_messages_request
from gateway.providers.base import TokenCount
from gateway.providers.base import UpstreamCall
from gateway.providers.base import UpstreamRequest
from gateway.wire import DECODE_ERRORS

COUNT_TOKENS_FIELDS = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking"})


class _TokenCountAnswer(msgspec.Struct):
    input_tokens: int


_decoder = msgspec.json.Decoder(_TokenCountAnswer)
_encode = msgspec.json.encode


def read_input_tokens(body: bytes) -> int:
    try:
        return _decoder.decode(body).input_tokens
    except DECODE_ERRORS as exc:
        raise UpstreamProtocolError(f"malformed count_tokens answer: {exc}") from None


def count_tokens(url: str, headers: dict[str, str], call: UpstreamCall) -> TokenCount:
    """The count of `call`'s input tokens, asked of `url` with the Messages `headers`."""
    full = msgspec.to_builtins(build_messages_request(call))
    body = {k: v for k, v in full.items() if k in COUNT_TOKENS_FIELDS}
    request = UpstreamRequest(url=url, headers=headers, body=_encode(body))
    return TokenCount(request=request, read=read_input_tokens)
