"""The faulty upstream's Bedrock Converse wire: the healthy answer as ConverseStream events in
AWS event-stream frames (framed with `encode_message`, as the Bedrock fake does), the Converse
JSON answer, AWS error answers (`x-amzn-errortype` + `{"message"}`), and the damaged frames
the Bedrock-only modes send. The answer is the same TEXT and CALLS as the other kinds:
messageStart, a text block (index 0) of TEXT_PIECES, with tools two toolUse blocks (index 1
and 2: contentBlockStart, input fragments, contentBlockStop), messageStop, metadata usage.
A last assistant message is a prefill for Anthropic's models (`anthropic.` in the model id),
refused as Anthropic refuses it when it ends in whitespace; the other models refuse it, as
Bedrock does for a model that takes none."""

from __future__ import annotations

import json
from typing import Any

from gateway.framing.aws_eventstream import encode_message
from tests.upstreams.faulty_wire import CALLS
from tests.upstreams.faulty_wire import TEXT
from tests.upstreams.faulty_wire import TEXT_PIECES
from tests.upstreams.faulty_wire import TRAILING_WHITESPACE
from tests.upstreams.faulty_wire import Api
from tests.upstreams.faulty_wire import BadPrefill
from tests.upstreams.faulty_wire import checked
from tests.upstreams.faulty_wire import fragments
from tests.upstreams.faulty_wire import last_assistant
from tests.upstreams.faulty_wire import text_of

Headers = dict[str, str | bytes | bool | int]
USAGE = {"inputTokens": 30, "outputTokens": 12, "totalTokens": 42}
# AWS error type of an HTTP status, as `x-amzn-errortype` names it
ERROR_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    429: "ThrottlingException",
    503: "ServiceUnavailableException",
}


def event(event_type: str, payload: dict[str, Any]) -> bytes:
    headers: Headers = {
        ":event-type": event_type,
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return encode_message(headers, json.dumps({**payload, "p": "abcdefgh"}).encode())


def exception(kind: str, message: str) -> bytes:
    """An `:message-type: exception` frame, as Bedrock ends a stream it cannot finish."""
    headers: Headers = {
        ":exception-type": kind,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


def bad_crc(frame: bytes) -> bytes:
    """`frame` with its message CRC (the last four bytes) wrong; the prelude stays valid, so
    a decoder reads the whole frame before it can tell."""
    crc = int.from_bytes(frame[-4:], "big") ^ 0x5A5A5A5A
    return frame[:-4] + crc.to_bytes(4, "big")


def bedrock_events(tools: bool, pieces: list[str] = TEXT_PIECES) -> list[bytes]:
    events = [event("messageStart", {"role": "assistant"})]
    events += [
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": p}}) for p in pieces
    ]
    events.append(event("contentBlockStop", {"contentBlockIndex": 0}))
    if tools:
        for index, (name, args) in enumerate(CALLS, 1):
            start = {"toolUse": {"toolUseId": f"tooluse_faulty_{index}", "name": name}}
            events.append(event("contentBlockStart", {"contentBlockIndex": index, "start": start}))
            for piece in fragments(json.dumps(args), 7):
                delta = {"toolUse": {"input": piece}}
                events.append(
                    event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})
                )
            events.append(event("contentBlockStop", {"contentBlockIndex": index}))
    events.append(event("messageStop", {"stopReason": "tool_use" if tools else "end_turn"}))
    events.append(event("metadata", {"usage": USAGE, "metrics": {"latencyMs": 12}}))
    return events


def bedrock_response(tools: bool, text: str = TEXT) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"text": text}]
    if tools:
        content += [
            {"toolUse": {"toolUseId": f"tooluse_faulty_{i}", "name": name, "input": args}}
            for i, (name, args) in enumerate(CALLS, 1)
        ]
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": "tool_use" if tools else "end_turn",
        "usage": USAGE,
        "metrics": {"latencyMs": 12},
    }


def bedrock_prefill(body: dict[str, Any]) -> str | None:
    """Converse: a last assistant message is a prefill for Anthropic's models only (the
    body's `model` is the one of the request's path)."""
    last = last_assistant(body)
    if last is None:
        return None
    if "anthropic." not in str(body.get("model")):
        raise BadPrefill(
            "A conversation must end with a user message. Try again with a conversation"
            " that ends with a user message."
        )
    prefill = text_of(last.get("content"))
    if prefill != prefill.rstrip():
        raise BadPrefill(f"The model returned the following errors: {TRAILING_WHITESPACE}")
    return checked(prefill)


def bedrock_error(status: int, message: str) -> dict[str, Any]:
    return {"message": message}


def bedrock_error_headers(status: int) -> dict[str, str]:
    kind = ERROR_TYPES.get(status, "InternalServerException")
    return {"x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}


def _not_json_frame() -> bytes:
    """A well-framed contentBlockDelta (both CRCs right) whose payload is cut inside its JSON."""
    payload = b'{"contentBlockIndex":0,"delta":{"te'
    headers: Headers = {
        ":event-type": "contentBlockDelta",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return encode_message(headers, payload)


BEDROCK = Api(
    "bedrock",
    bedrock_events,
    bedrock_response,
    bedrock_error,
    bedrock_prefill,
    1,
    exception("serviceUnavailableException", "Bedrock is unable to process your request."),
    503,
    _not_json_frame(),
    content_type="application/vnd.amazon.eventstream",
    error_headers=bedrock_error_headers,
    exception_event=exception("throttlingException", "Too many tokens, please wait."),
    exception_status=429,
    retry_after=False,
    checksummed=True,
)
