"""Every fuzz target by name, with its seeds (the fuzzers start from these and mutate).

A target takes bytes and returns None; it raises `ContractBroken` (or whatever the code
under test let escape) when the contract is broken. Names are the atheris harness names
(`fuzz/fuzz_<name>.py`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

from tests.fuzz import seeds
from tests.fuzz.targets_framing import aws_eventstream
from tests.fuzz.targets_framing import http1
from tests.fuzz.targets_framing import ndjson
from tests.fuzz.targets_framing import sse
from tests.fuzz.targets_providers import PROVIDERS
from tests.fuzz.targets_providers import STREAM_DIALECTS
from tests.fuzz.targets_providers import UNARY_DIALECTS
from tests.fuzz.targets_providers import error_input
from tests.fuzz.targets_providers import errors
from tests.fuzz.targets_providers import stream_target
from tests.fuzz.targets_providers import unary
from tests.fuzz.targets_requests import EMBEDDING_FAMILIES
from tests.fuzz.targets_requests import accumulator
from tests.fuzz.targets_requests import embeddings
from tests.fuzz.targets_requests import envelope
from tests.fuzz.targets_requests import messages_request
from tests.fuzz.targets_requests import responses_request

Target = Callable[[bytes], None]

TARGETS: dict[str, Target] = {
    "sse": sse,
    "ndjson": ndjson,
    "aws_eventstream": aws_eventstream,
    "http1": http1,
    **{name: stream_target(name) for name in STREAM_DIALECTS},
    "unary": unary,
    "errors": errors,
    "accumulator": accumulator,
    "envelope": envelope,
    "messages_request": messages_request,
    "responses_request": responses_request,
    "embeddings": embeddings,
}

_CUTS = (0, 1, 7, 200)
WHOLE_INPUT = frozenset(
    {"unary", "errors", "embeddings", "messages_request", "responses_request"}
)  # one read, single bytes, small and large reads


def _huge_prelude() -> bytes:
    """A frame prelude with a good CRC and a total_length of 4 GiB."""
    head = struct.pack(">II", 0xFFFFFFF0, 0)
    return head + struct.pack(">I", zlib.crc32(head))


def _http_responses(bodies: list[bytes]) -> list[bytes]:
    out = []
    for body in bodies[:3]:
        out.append(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        chunked = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in body.split(b"\n\n") if p)
        out.append(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked
            + b"0\r\nX-Trailer: t\r\n\r\n"
        )
    out.append(b"HTTP/1.0 429 Too Many\r\nRetry-After: 3\r\n\r\nslow down")
    return out


def seeds_of(name: str) -> list[bytes]:
    """The payloads a target starts from (without the cut byte)."""
    streams = seeds.stream_fixtures()
    if name in streams:
        return streams[name]
    sse_bodies = [*streams["openai_chat"], *streams["anthropic"], *streams["gemini"]]
    if name == "sse":
        return [*sse_bodies, b"\xef\xbb\xbfevent: x\rid: 1\r\ndata: a\rdata: b\r\n\r\n: c\n"]
    if name == "ndjson":
        return streams["ollama"]
    if name == "aws_eventstream":
        return [*streams["bedrock"], _huge_prelude()]
    if name == "http1":
        return _http_responses(sse_bodies)
    if name == "unary":
        return [bytes([i]) + seeds.UNARY_BODIES[body] for i, (_, body) in enumerate(UNARY_DIALECTS)]
    if name == "errors":
        return [
            error_input(i % len(PROVIDERS), status, body)
            for i, (status, body) in enumerate(seeds.error_bodies())
        ]
    if name == "accumulator":
        return [streams["openai_chat"][0].replace(b"data: ", b"").replace(b"\n\n", b"\n")]
    if name == "envelope":
        return [
            b'Let me check. ```json\n{"tool_calls": [{"name": "get_weather", '
            b'"arguments": {"city": "Paris"}}]}\n``` done',
            b'{"name": "f", "parameters": "{\\"a\\": [1, 2,]}"} {"name": "nope"} a set {1, 2}',
        ]
    if name == "messages_request":
        return seeds.MESSAGES_REQUESTS
    if name == "responses_request":
        return seeds.RESPONSES_REQUESTS
    if name == "embeddings":
        return [
            bytes([EMBEDDING_FAMILIES.index(family)]) + body
            for family, body in seeds.EMBEDDINGS_BODIES.items()
        ]
    raise KeyError(name)


def corpus(name: str) -> list[bytes]:
    """Whole target inputs: each seed payload behind several cut bytes; for the targets
    whose first byte picks a variant (unary, errors, embeddings) the seeds carry it, and
    the request targets read JSON only."""
    if name in WHOLE_INPUT:
        return seeds_of(name)
    return [bytes([cut]) + payload for payload in seeds_of(name) for cut in _CUTS]
