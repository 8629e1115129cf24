"""The healthy answer and the error shapes of the faulty upstream, in each provider's exact
wire format: OpenAI Chat Completions chunks (`data:` lines, `[DONE]`) and Anthropic Messages
events (`event:` + `data:`, message_start ... message_stop). Both say the same thing: TEXT, and
with tools the two CALLS, so a client cannot tell which provider answered.

A request may carry the answer's start (a prefill: `prefill` of its API reads it, and raises
BadPrefill with the provider's own 400 message when the provider would refuse it); the
answer is then the rest of TEXT (`rest`), in the same pieces, and the calls."""

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
# what Anthropic answers (a 400) to a prefill that ends in whitespace
TRAILING_WHITESPACE = "messages: final assistant content cannot end with trailing whitespace"
USAGE_IN = {"input_tokens": 30, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


def sse(data: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def fragments(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


class BadPrefill(Exception):
    """The request's answer start is one its provider refuses, or not a start of TEXT (a
    gateway that continued an answer wrongly): the message of the 400 to answer."""


def rest(prefill: str) -> list[str]:
    """What follows `prefill` (a start of TEXT) in TEXT_PIECES: the same pieces, the first
    of them cut where the prefill ends (so the continuation of `The answer` begins with the
    lone space the gateway cut from an Anthropic prefill); none when TEXT is all there."""
    out, at = [], 0
    for piece in TEXT_PIECES:
        if at + len(piece) > len(prefill):
            out.append(piece[max(len(prefill) - at, 0) :])
        at += len(piece)
    return out


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or text parts / blocks (`{"text": ...}`:
    OpenAI parts, Anthropic blocks and Bedrock Converse blocks alike)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
    return ""


def last_assistant(body: dict[str, Any]) -> dict[str, Any] | None:
    messages = body.get("messages") or []
    last = messages[-1] if messages else None
    return last if isinstance(last, dict) and last.get("role") == "assistant" else None


def checked(prefill: str) -> str:
    if not TEXT.startswith(prefill):
        raise BadPrefill(
            f"faulty upstream: the assistant prefill {prefill!r} is not a start of the"
            f" answer {TEXT!r}"
        )
    return prefill


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


def openai_events(tools: bool, pieces: list[str] = TEXT_PIECES) -> list[bytes]:
    """The healthy stream: role, the text `pieces`, then (tools) the calls interleaved,
    finish."""
    events = [openai_chunk({"role": "assistant", "content": None})]
    events += [openai_chunk({"content": p}) for p in pieces]
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


def openai_completion(tools: bool, text: str = TEXT) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
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


def openai_prefill(body: dict[str, Any]) -> str | None:
    """A last assistant message is the answer's start only with vLLM's flags
    (`continue_final_message: true`, `add_generation_prompt: false`) or DeepSeek's
    `"prefix": true` on it; without them a server answers it with a new message."""
    last = last_assistant(body)
    if body.get("continue_final_message") is True and body.get("add_generation_prompt", True):
        # vLLM's own check: the generation prompt opens a new turn, so both cannot hold
        raise BadPrefill("continue_final_message and add_generation_prompt cannot both be true")
    if last is None:
        return None
    if body.get("continue_final_message") is True or last.get("prefix") is True:
        return checked(text_of(last.get("content")))
    return None


# --- Anthropic Messages --------------------------------------------------------------------


def anthropic_events(tools: bool, pieces: list[str] = TEXT_PIECES) -> list[bytes]:
    """The healthy stream: message_start, ping, a text block of the text `pieces` (empty
    when the prefill was all of TEXT), (tools) two tool_use blocks, message_delta,
    message_stop."""
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

    block(0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces])
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


def anthropic_message(tools: bool, text: str = TEXT) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
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


def anthropic_prefill(body: dict[str, Any]) -> str | None:
    """A last assistant message is the answer's start; Anthropic refuses one that ends in
    whitespace."""
    last = last_assistant(body)
    if last is None:
        return None
    prefill = text_of(last.get("content"))
    if prefill != prefill.rstrip():
        raise BadPrefill(TRAILING_WHITESPACE)
    return checked(prefill)


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
    events: Any  # (tools, pieces) -> list[bytes]
    unary: Any  # (tools, text) -> dict
    error: Any  # (status, message) -> dict
    prefill: Callable[[dict[str, Any]], str | None]  # (body) -> the answer's start, if any
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
    openai_prefill,
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
    anthropic_prefill,
    3,
    sse(OVERLOADED, "error"),
    529,
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"del\n\n',
    sse(OVERLOADED, "error"),
    529,
)
