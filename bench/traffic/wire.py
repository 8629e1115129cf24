"""The answers' shape, shared by the fake upstream (which builds them) and the client (which
checks them).

Every content delta the upstream sends is a *stamp*: ``@<time.monotonic_ns()>;`` padded with
FILL to the chunk size. CLOCK_MONOTONIC is one clock for every process of the machine, so the
client subtracts the stamp from its own receive time and gets the delay added by whatever sits
between the two (nothing for `direct`, a gateway otherwise). In tools mode the stamps travel in
the `pad` string of each call's arguments instead, split into argument deltas by index, so the
assembled arguments still parse to TOOL_CALLS' objects with `pad` made only of stamps.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

MODEL = "fake-model"
COMPLETION_ID = "chatcmpl-traffic"
FILL = b"x" * 4096
STAMP_RE = re.compile(r"@(\d+);x*")

# the two parallel calls of tools mode: (id, name, the arguments without `pad`)
TOOL_CALLS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("call_traffic_0", "get_weather", {"location": "Paris", "unit": "celsius"}),
    ("call_traffic_1", "get_time", {"timezone": "Europe/Paris"}),
)

# the tools a tools-mode request offers (the client's body; the upstream ignores the contents)
REQUEST_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "bench tool",
            "parameters": {
                "type": "object",
                "properties": {key: {"type": "string"} for key in [*args, "pad"]},
            },
        },
    }
    for _, name, args in TOOL_CALLS
]

_encode = msgspec.json.Encoder().encode


def stamp(now_ns: int, size: int) -> bytes:
    """One stamp padded to `size` bytes (longer when `size` is below the stamp itself)."""
    token = b"@%d;" % now_ns
    return token + FILL[: max(0, size - len(token))]


def stamps_in(text: str) -> list[int]:
    """The send times (ns) of the stamps in a content or arguments delta, in order."""
    # str.find rather than STAMP_RE: this runs for every chunk the client reads
    out = []
    at = text.find("@")
    while at >= 0:
        end = text.find(";", at)
        if end < 0:
            break
        digits = text[at + 1 : end]
        if digits.isdigit():
            out.append(int(digits))
        at = text.find("@", end)
    return out


def arguments_open(call_index: int) -> str:
    """The arguments text before the stamps: the object up to the opening quote of `pad`."""
    args = json.dumps(TOOL_CALLS[call_index][2], separators=(",", ":"))
    return args[:-1] + ',"pad":"'


ARGUMENTS_CLOSE = '"}'


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def check_tool_calls(calls: dict[int, dict[str, str]]) -> str | None:
    """None when the assembled calls (index -> id, name, arguments) are TOOL_CALLS exactly
    (arguments compared as parsed JSON, `pad` only stamps); else what is wrong."""
    if sorted(calls) != list(range(len(TOOL_CALLS))):
        return f"indexes {sorted(calls)}"
    for index, (call_id, name, args) in enumerate(TOOL_CALLS):
        call = calls[index]
        if call.get("id") != call_id or call.get("name") != name:
            return f"call {index} is {call.get('id')!r}/{call.get('name')!r}"
        try:
            parsed = json.loads(call.get("arguments", ""))
        except ValueError:
            return f"call {index} arguments do not parse"
        if not isinstance(parsed, dict):
            return f"call {index} arguments are not an object"
        pad = parsed.pop("pad", None)
        if parsed != args:
            return f"call {index} arguments {parsed!r}"
        if not isinstance(pad, str) or STAMP_RE.sub("", pad):
            return f"call {index} pad is not stamps"
    return None


def request_body(
    model: str, prompt_bytes: int, stream: bool, tools: bool, max_tokens: int = 256
) -> bytes:
    """A chat request whose user message makes the body about `prompt_bytes` long."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": ""},
        ],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tools"] = REQUEST_TOOLS
    empty = len(_encode(body))
    # words of prose-like filler: JSON-safe, no escaping, many tokens for a tokenizer
    filler = ("lorem ipsum dolor sit amet " * (prompt_bytes // 27 + 1))[
        : max(0, prompt_bytes - empty)
    ]
    body["messages"][1]["content"] = filler
    return _encode(body)
