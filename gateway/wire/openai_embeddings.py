"""OpenAI embeddings wire types: the client's request, the answer, and the lenient view of an
OpenAI-compatible upstream's answer. Pure data, no IO.

`input` stays untyped here (a string, a list of strings, a list of token ids or a list of
lists of token ids): msgspec cannot tell list shapes apart in a union, so the server checks
it and says which item is wrong.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET
from msgspec import UnsetType


class EmbeddingsRequest(msgspec.Struct, kw_only=True):
    """`POST /v1/embeddings`. Fields the gateway does not model are kept in the client's
    JSON and forwarded to OpenAI-compatible upstreams untouched."""

    model: str
    input: Any
    encoding_format: str | UnsetType | None = UNSET  # "float" (default) | "base64"
    dimensions: int | UnsetType | None = UNSET
    user: str | UnsetType | None = UNSET


class Embedding(msgspec.Struct, kw_only=True):
    """One vector: a list of floats, or (base64) the little-endian float32 bytes, encoded."""

    object: str = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingsUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingsUsage


# --- an OpenAI-compatible upstream's answer (lenient: unknown fields are ignored) ----------


class UpstreamEmbedding(msgspec.Struct, kw_only=True):
    embedding: list[float] | str  # floats, or base64 when the upstream was asked for it
    index: int | UnsetType = UNSET


class UpstreamUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int | None = None
    total_tokens: int | None = None


class UpstreamEmbeddings(msgspec.Struct, kw_only=True):
    data: list[UpstreamEmbedding]
    usage: UpstreamUsage | None = None


encoder = msgspec.json.Encoder()
upstream_decoder = msgspec.json.Decoder(UpstreamEmbeddings)
