"""Embeddings against OpenAI and OpenAI-compatible servers (`{base_url}/embeddings`) and Azure
OpenAI. Sans-IO.

The upstream body is the client's own JSON with `model` set to the target's upstream id, so
token-id input, `dimensions`, `encoding_format`, `user` and fields the gateway does not model
reach the upstream as sent. One call carries every input (the gateway caps a request at
OpenAI's own 2048 inputs). The answer may hold floats or base64 (when the client asked for
base64, so did the upstream); either is decoded and the gateway renders the client's format.
"""

from __future__ import annotations

from collections.abc import Mapping

from msgspec import UNSET

from gateway.config_base import effective_base_url
from gateway.errors import UpstreamProtocolError
from gateway.providers.base import UpstreamRequest
from gateway.providers.base import no_token_source
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import Part
from gateway.providers.embeddings import PartResult
from gateway.providers.embeddings import decode_json
from gateway.providers.embeddings import floats_of_base64
from gateway.providers.openai.config import OpenAIProvider
from gateway.wire.openai_embeddings import encoder
from gateway.wire.openai_embeddings import upstream_decoder


def upstream_body(call: EmbeddingsCall) -> bytes:
    body = dict(call.body)
    body["model"] = call.model
    return encoder.encode(body)


def parse_openai(body: bytes) -> PartResult:
    """An OpenAI embeddings answer; vectors placed by their `index` when it is given."""
    answer = decode_json(upstream_decoder, body, "embeddings answer")
    vectors: list[list[float] | None] = [None] * len(answer.data)
    for position, item in enumerate(answer.data):
        index = item.index if item.index is not UNSET else position
        if not 0 <= index < len(vectors) or vectors[index] is not None:
            raise UpstreamProtocolError(f"the upstream sent a misplaced embedding index {index}")
        embedding = item.embedding
        vectors[index] = floats_of_base64(embedding) if isinstance(embedding, str) else embedding
    tokens = answer.usage.prompt_tokens if answer.usage is not None else None
    return PartResult(vectors=[v for v in vectors if v is not None], prompt_tokens=tokens)


class OpenAIEmbeddings:
    """The `openai` kind: `POST {base_url}/embeddings`, the key as a bearer token."""

    token_source = no_token_source
    takes_token_ids = True

    def __init__(self, provider: OpenAIProvider) -> None:
        self._url = effective_base_url(provider) + "/embeddings"

    def url(self, call: EmbeddingsCall) -> str:
        return self._url

    def headers(self, call: EmbeddingsCall) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if call.key is not None and call.key.key:
            headers["Authorization"] = "Bearer " + call.key.key.reveal()
        return headers

    def plan(self, call: EmbeddingsCall) -> list[Part]:
        request = UpstreamRequest(
            url=self.url(call), headers=self.headers(call), body=upstream_body(call)
        )
        return [Part(request=request, start=0, count=len(call.inputs))]

    def parse(
        self, call: EmbeddingsCall, part: Part, body: bytes, headers: Mapping[str, str]
    ) -> PartResult:
        return parse_openai(body)
