"""The healthy answer and the error shapes of the faulty upstream, in each provider's exact
wire format: OpenAI Chat Completions chunks (`data:` lines, `[DONE]`) and Anthropic Messages
events (`event:` + `data:`, message_start ... message_stop). Both say the same thing: TEXT, and
with tools the two CALLS, so a client cannot tell which provider answered."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TEXT_PIECES = ["The ", "answer ", "is ", "42."]
TEXT = "".join(TEXT_PIECES)
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("search_documents", {"query": "quarterly report", "limit": 5}),
    ("get_user", {"user_id": "u-42", "fields": ["name", "email"]}),
]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "integer" if k == "limit" else "string"} for k in args},
            },
        },
    }
    for name, args in CALLS
]
USAGE_IN = {"input_tokens": 30, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


def sse(data: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def fragments(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# --- OpenAI Chat Completions ---------------------------------------------------------------


def openai_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return sse(
        {
            "id": "chatcmpl-faulty",
            "object": "chat.completion.chunk",
            "created": 1754693439,
            "model": "faulty-gpt",
            "system_fingerprint": "fp_faulty",
            "choices": [choice],
        }
    )


def openai_events(tools: bool) -> list[bytes]:
    """The healthy stream: role, TEXT_PIECES, then (tools) the calls interleaved, finish."""
    events = [openai_chunk({"role": "assistant", "content": None})]
    events += [openai_chunk({"content": p}) for p in TEXT_PIECES]
    if tools:
        for i, (name, _) in enumerate(CALLS):
            start = {"index": i, "id": f"call_faulty_{i}", "type": "function"}
            start["function"] = {"name": name, "arguments": ""}
            events.append(openai_chunk({"tool_calls": [start]}))
        parts = [fragments(json.dumps(args)) for _, args in CALLS]
        for step in range(max(len(p) for p in parts)):
            for i, pieces in enumerate(parts):
                if step < len(pieces):
                    delta = {"index": i, "function": {"arguments": pieces[step]}}
                    events.append(openai_chunk({"tool_calls": [delta]}))
    events.append(openai_chunk({}, "tool_calls" if tools else "stop"))
    usage = {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
    events.append(
        sse(
            {
                "id": "chatcmpl-faulty",
                "object": "chat.completion.chunk",
                "created": 1754693439,
                "model": "faulty-gpt",
                "choices": [],
                "usage": usage,
            }
        )
    )
    events.append(b"data: [DONE]\n\n")
    return events


def openai_completion(tools: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": TEXT, "refusal": None}
    if tools:
        message["tool_calls"] = [
            {
                "id": f"call_faulty_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(CALLS)
        ]
    return {
        "id": "chatcmpl-faulty-unary",
        "object": "chat.completion",
        "created": 1754693439,
        "model": "faulty-gpt",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tools else "stop",
            }
        ],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
    }


def openai_error(status: int, message: str) -> dict[str, Any]:
    kind = {429: "rate_limit_error", 400: "invalid_request_error"}.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": f"faulty_{status}"}}


# --- Anthropic Messages --------------------------------------------------------------------


def anthropic_events(tools: bool) -> list[bytes]:
    """The healthy stream: message_start, ping, a text block of TEXT_PIECES, (tools) two
    tool_use blocks, message_delta, message_stop."""
    message: dict[str, Any] = {
        "id": "msg_faulty",
        "type": "message",
        "role": "assistant",
        "model": "faulty-claude",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**USAGE_IN, "output_tokens": 1},
    }
    events = [
        sse({"type": "message_start", "message": message}, "message_start"),
        sse({"type": "ping"}, "ping"),
    ]

    def block(index: int, content: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        start = {"type": "content_block_start", "index": index, "content_block": content}
        events.append(sse(start, "content_block_start"))
        for d in deltas:
            delta = {"type": "content_block_delta", "index": index, "delta": d}
            events.append(sse(delta, "content_block_delta"))
        stop = {"type": "content_block_stop", "index": index}
        events.append(sse(stop, "content_block_stop"))

    block(0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in TEXT_PIECES])
    if tools:
        for i, (name, args) in enumerate(CALLS, 1):
            pieces = ["", *fragments(json.dumps(args), 6)]
            content = {"type": "tool_use", "id": f"toolu_faulty_{i}", "name": name, "input": {}}
            block(i, content, [{"type": "input_json_delta", "partial_json": p} for p in pieces])
    end = {"stop_reason": "tool_use" if tools else "end_turn", "stop_sequence": None}
    delta = {"type": "message_delta", "delta": end, "usage": {"output_tokens": 12}}
    events.append(sse(delta, "message_delta"))
    events.append(sse({"type": "message_stop"}, "message_stop"))
    return events


def anthropic_message(tools: bool) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": TEXT}]
    if tools:
        content += [
            {"type": "tool_use", "id": f"toolu_faulty_{i}", "name": name, "input": args}
            for i, (name, args) in enumerate(CALLS, 1)
        ]
    return {
        "id": "msg_faulty_unary",
        "type": "message",
        "role": "assistant",
        "model": "faulty-claude",
        "content": content,
        "stop_reason": "tool_use" if tools else "end_turn",
        "stop_sequence": None,
        "usage": {**USAGE_IN, "output_tokens": 12},
    }


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_f"}


OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
OPENAI_OVERLOADED = sse(
    {
        "error": {
            "message": "Overloaded",
            "type": "server_error",
            "param": None,
            "code": "overloaded",
        }
    }
)


@dataclass(frozen=True)
class Api:
    """How one provider API says the same things."""

    name: str
    events: Any  # (tools) -> list[bytes]
    unary: Any  # (tools) -> dict
    error: Any  # (status, message) -> dict
    lead: int  # events before the first content piece
    overloaded_event: bytes
    overloaded_status: int
    broken: bytes  # an event cut inside its JSON
    exception_event: bytes  # the provider's in-stream error, sent after some content
    exception_status: int  # what a non-streaming answer says instead
    content_type: str = "text/event-stream"
    error_headers: Callable[[int], dict[str, str]] = lambda status: {}
    retry_after: bool = True  # a 429 says when to come back (Bedrock's does not)
    checksummed: bool = False  # frames carry a CRC (else bad-crc modes stand in as bad-json)


OPENAI = Api(
    "openai",
    openai_events,
    openai_completion,
    openai_error,
    1,
    OPENAI_OVERLOADED,
    503,
    b'data: {"id":"chatcmpl-faulty","object":"chat.completion.chunk","choices":[{"ind\n\n',
    OPENAI_OVERLOADED,
    503,
)
ANTHROPIC = Api(
    "anthropic",
    anthropic_events,
    anthropic_message,
    anthropic_error,
    3,
    sse(OVERLOADED, "error"),
    529,
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"del\n\n',
    sse(OVERLOADED, "error"),
    529,
)
