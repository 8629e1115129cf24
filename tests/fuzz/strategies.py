"""Hypothesis strategies for hostile input: JSON of any shape, JSON with one field given a
wrong value, byte mutations of recorded streams, and the re-framing of mutated events.

`FUZZ_EXAMPLES` (environment) scales every fuzz test: small in `make test`, large when
fuzzing for longer without atheris.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st

from gateway.framing.aws_eventstream import EventStreamDecoder
from gateway.framing.aws_eventstream import encode_message
from gateway.framing.ndjson import NDJSONDecoder
from gateway.framing.sse import SSEDecoder
from gateway.framing.sse import encode_event

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
fuzz_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_EDGE_INTS = [0, -1, 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30]
_EDGE_TEXT = ["", " ", "\x00", "\n", "\r\n\r\n", "data: x\n\n", "[DONE]", "\ud7ff\ue000", "é" * 3]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(_EDGE_INTS),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(_EDGE_TEXT),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


_DEEP = "\x00deep:{}\x00"  # stands for a nested value until `to_json` writes it


def deep(depth: int) -> str:
    """A JSON value nested `depth` levels (arrays and objects alternating), written out by
    `to_json` (a Python value that deep could not be encoded by the json module)."""
    return _DEEP.format(depth)


def _deep_json(depth: int) -> bytes:
    opened = b"".join(b"[" if level % 2 else b'{"a":' for level in range(depth))
    closed = b"".join(b"]" if level % 2 else b"}" for level in reversed(range(depth)))
    return opened + b"0" + closed


# 3000: deep enough to pass any recursion limit the JSON parser has
hostile_values = st.one_of(json_values, st.sampled_from([deep(5), deep(50), deep(3000)]))


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `value` (dict keys and list indexes), itself included."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += paths(item, (*prefix, i))
    return out


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A copy of `value` with the value at `path` replaced by `new` (or removed when `new`
    is the `REMOVE` marker and the parent is an object)."""
    if not path:
        return None if new is REMOVE else new
    out = copy.deepcopy(value)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    if new is REMOVE and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = None if new is REMOVE else new
    return out


REMOVE = object()


@st.composite
def mutated_json(draw: st.DrawFn, value: Any) -> Any:
    """`value` with one to three fields given a value of another type (or removed)."""
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(value)))
        value = replaced(value, path, draw(st.just(REMOVE) | hostile_values))
    return value


def to_json(value: Any) -> bytes:
    """Compact JSON; integers of any size are written as they are, `deep` values nested."""
    out = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    for depth in (5, 50, 3000):
        marker = json.dumps(deep(depth)).encode()
        if marker in out:
            out = out.replace(marker, _deep_json(depth))
    return out


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` after a few byte-level mutations: flips, truncation, duplicated or dropped
    ranges, inserted garbage, invalid UTF-8."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "duplicate", "drop", "insert", "utf8"]))
        at = draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del buf[at:]
        elif op in ("duplicate", "drop"):
            end = at + draw(st.integers(1, 256))
            if op == "duplicate":
                buf[end:end] = buf[at:end]
            else:
                del buf[at:end]
        elif op == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=32))
        else:
            buf[at:at] = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90"]))
    return bytes(buf)


def events_of(framing: str, body: bytes) -> list[Any]:
    """The frames of a recorded body: SSE events, NDJSON lines or event-stream messages."""
    if framing == "sse":
        sse = SSEDecoder()
        return sse.feed(body) + sse.close()
    if framing == "ndjson":
        nd = NDJSONDecoder()
        return nd.feed(body) + nd.close()
    aws = EventStreamDecoder()
    return aws.feed(body) + aws.close()


def payload_of(framing: str, frame: Any) -> bytes:
    if framing == "sse":
        return bytes(frame.data)
    if framing == "ndjson":
        return bytes(frame)
    return bytes(frame.payload)


def reframed(framing: str, frame: Any, payload: bytes) -> bytes:
    """`frame` with `payload` as its data, framed again."""
    if framing == "sse":
        return encode_event(payload, event=frame.event or None)
    if framing == "ndjson":
        return payload.replace(b"\n", b" ") + b"\n"
    headers = {k: v for k, v in frame.headers.items() if isinstance(v, str)}
    return encode_message(headers, payload)
