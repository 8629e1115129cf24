"""Synthetic upstream streams for the microbenchmarks, in OpenAI's exact chunk shape.

The shape follows the recorded `openai_chat_parallel_tools.sse` (tests/wire_fixtures): every chunk
carries `id`, `object`, `created`, `model`, `service_tier`, `system_fingerprint`,
`"usage":null` (include_usage is on, as the gateway always asks), `choices` with
`"logprobs":null` and `"finish_reason":null`, and an `obfuscation` padding string. The first
delta of a tool call is `{"index","id","type","function":{"name","arguments":""}}`; later ones
carry only `{"index","function":{"arguments"}}`. The stream ends with a `delta:{}` finish chunk,
a `choices:[]` usage chunk and `data: [DONE]`.

Everything is built once at import time (deterministically) so the benchmarks time only the
gateway's code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bench.traffic.wire import usage

CHUNK_ID = "chatcmpl-C2QD1kGWsTW5OWiqAtOSFEAOfPfQH"
CREATED = 1754693439
MODEL = "gpt-4o-2024-08-06"
READ_SIZE = 1400  # about one TCP segment's payload on a typical path

# What the three tool calls of the synthetic turn are called with: realistic argument sizes.
CALLS: list[tuple[str, dict[str, Any]]] = [
    (
        "search_documents",
        {
            "query": "quarterly revenue by region for the last fiscal year",
            "limit": 10,
            "filters": {"department": "finance", "year": 2024, "tags": ["q3", "q4"]},
        },
    ),
    (
        "get_user",
        {"user_id": "u-42", "fields": ["name", "email", "team", "manager", "timezone"]},
    ),
    (
        "get_weather",
        {"city": "Paris", "country": "FR", "units": "metric", "days": 3, "hourly": False},
    ),
]

_TEXT = (
    "Sure, here is a summary of the quarterly figures you asked for. Revenue grew in every "
    "region, led by Europe and North America, while costs stayed flat. I will look up the "
    "documents, the user's profile and the weather forecast for the offsite in Paris so that "
    "the plan for next week can take all of it into account. One moment while I call the "
    "tools that hold this information and put the answer together for you."
)
_WORDS = _TEXT.split()

_PAD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _obfuscation(n: int) -> str:
    """Deterministic stand-in for OpenAI's random padding (4 to 15 characters)."""
    length = 4 + (n * 7) % 12
    return "".join(_PAD[(n * 13 + i * 5) % len(_PAD)] for i in range(length))


def _chunk(n: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
    obj = {
        "id": CHUNK_ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "service_tier": "default",
        "system_fingerprint": "fp_07871e2ad8",
        "usage": None,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "obfuscation": _obfuscation(n),
    }
    return json.dumps(obj, separators=(",", ":")).encode()


def _usage_chunk(completion_tokens: int) -> bytes:
    obj = {
        "id": CHUNK_ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "service_tier": "default",
        "system_fingerprint": "fp_07871e2ad8",
        "choices": [],
        "usage": usage(364, completion_tokens),
        "obfuscation": "F1wZCrV0lEsbu",
    }
    return json.dumps(obj, separators=(",", ":")).encode()


def call_id(i: int) -> str:
    return f"call_{i}q2UyBRP7eXNTzAoR8lEhjc9Z"[:29]


def argument_pieces(i: int, size: int = 5) -> list[str]:
    """Call i's JSON arguments cut into `size`-character fragments, as models stream them."""
    text = json.dumps(CALLS[i][1])
    return [text[k : k + size] for k in range(0, len(text), size)]


@dataclass(frozen=True)
class Stream:
    """One upstream body and what a correct consumer must make of it."""

    body: bytes
    events: int  # SSE events in the body, [DONE] included
    content: str  # the assistant text the content deltas add up to
    calls: list[tuple[str, dict[str, Any]]]  # (name, arguments) in tool-call index order

    def reads(self, size: int = READ_SIZE) -> list[bytes]:
        """The body as a socket would hand it over: `size`-byte reads cut anywhere."""
        return [self.body[k : k + size] for k in range(0, len(self.body), size)]

    def event_reads(self) -> list[bytes]:
        """The body one event per read (a live stream whose tokens arrive apart)."""
        return [part + b"\n\n" for part in self.body.split(b"\n\n") if part]


def openai_stream(
    content_chunks: int = 129, *, interleave: bool = False, repeat_identity: bool = False
) -> Stream:
    """Role chunk, `content_chunks` content deltas, then the three CALLS' tool-call deltas,
    the finish chunk, the usage chunk and [DONE].

    `interleave`: the calls' argument fragments arrive round-robin (0, 1, 2, 0, 1, 2, ...)
    after all three have started, as some providers stream parallel calls; otherwise each
    call is streamed whole before the next starts, as OpenAI does.
    `repeat_identity`: every tool-call delta repeats `id`, `type` and `function.name` (as
    some OpenAI-compatible servers do), so the accumulator must rewrite and re-encode them.
    """
    events: list[bytes] = []

    def add(delta: dict[str, Any], finish: str | None = None) -> None:
        events.append(_chunk(len(events), delta, finish))

    def start(i: int) -> None:
        add(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": call_id(i),
                        "type": "function",
                        "function": {"name": CALLS[i][0], "arguments": ""},
                    }
                ]
            }
        )

    def arguments(i: int, text: str) -> None:
        tool_call: dict[str, Any] = {"index": i, "function": {"arguments": text}}
        if repeat_identity:
            tool_call = {
                "index": i,
                "id": call_id(i),
                "type": "function",
                "function": {"name": CALLS[i][0], "arguments": text},
            }
        add({"tool_calls": [tool_call]})

    add({"role": "assistant", "content": None})
    words = [_WORDS[k % len(_WORDS)] + " " for k in range(content_chunks)]
    for word in words:
        add({"content": word})
    pieces = [argument_pieces(i) for i in range(len(CALLS))]
    if interleave:
        for i in range(len(CALLS)):
            start(i)
        for step in range(max(len(p) for p in pieces)):
            for i, parts in enumerate(pieces):
                if step < len(parts):
                    arguments(i, parts[step])
    else:
        for i, parts in enumerate(pieces):
            start(i)
            for part in parts:
                arguments(i, part)
    add({}, "tool_calls")
    events.append(_usage_chunk(len(events)))
    events.append(b"[DONE]")
    body = b"".join(b"data: " + e + b"\n\n" for e in events)
    return Stream(body=body, events=len(events), content="".join(words), calls=list(CALLS))
