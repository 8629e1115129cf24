"""What every fuzz target checks, and how a target's bytes become a sequence of reads.

The contract: a sans-IO decoder or translator fed anything either returns its typed output
or raises the documented error (`UpstreamError` and its subclasses for upstream bytes,
`ClientError` for a client's request). Any other exception escapes the target and is the
finding; a broken invariant raises `ContractBroken`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import msgspec

from gateway.framing.sse import SSEDecoder
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ErrorBody

_any_json = msgspec.json.Decoder()
_chunk = msgspec.json.Decoder(ChatChunk)
_error = msgspec.json.Decoder(ErrorBody)


class ContractBroken(AssertionError):
    """A target's output or state broke the documented contract."""


def check(ok: bool, what: str) -> None:
    if not ok:
        raise ContractBroken(what)


def split(data: bytes) -> tuple[int, bytes]:
    """(cut seed, payload): the first byte of a target's input chooses how it is cut."""
    return (data[0], data[1:]) if data else (0, b"")


def pieces(payload: bytes, cut_seed: int) -> Iterator[bytes]:
    """`payload` cut into reads of 1 .. 2**k bytes, k and the sizes drawn from `cut_seed`:
    seed 0 is one read, the others cut everywhere from single bytes to large blocks."""
    if cut_seed == 0 or len(payload) < 2:
        yield payload
        return
    rng = random.Random(cut_seed)
    largest = 1 << (cut_seed % 12)
    pos = 0
    while pos < len(payload):
        size = rng.randint(1, largest)
        yield payload[pos : pos + size]
        pos += size


def chat_sse_events(body: bytes) -> list[bytes]:
    """The data of every event of a chat SSE body the gateway wrote, each checked to be
    one JSON chunk or error body (or the `[DONE]` sentinel, last)."""
    decoder = SSEDecoder()
    events = decoder.feed(body) + decoder.close()
    check(body.endswith(b"\n\n") or not body, "an SSE body that does not end its last event")
    data = [e.data for e in events]
    for i, item in enumerate(data):
        if item == b"[DONE]":
            check(i == len(data) - 1, "events after [DONE]")
            continue
        try:
            item.decode()  # the decoders below do not check the fields they skip
            (_error if item.startswith(b'{"error"') else _chunk).decode(item)
        except (UnicodeDecodeError, msgspec.DecodeError) as exc:
            raise ContractBroken(
                f"an event the client cannot parse: {item[:200]!r}: {exc}"
            ) from None
    return data


def json_value(data: bytes) -> object:
    """`data` as JSON, or None when it is not (a target then has nothing to test)."""
    try:
        return _any_json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
