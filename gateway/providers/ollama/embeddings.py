"""Embeddings on Ollama's native API: `POST {base_url}/api/embed` with `{"model", "input":
[...], "dimensions"?}`, answered with `{"embeddings": [[...]], "prompt_eval_count": n}`.
One call takes every input. A configured key is sent as a bearer token (for a proxy in front,
or ollama.com). Sans-IO.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from gateway.config_base import effective_base_url
from gateway.providers.base import UpstreamRequest
from gateway.providers.base import no_token_source
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import Part
from gateway.providers.embeddings import PartResult
from gateway.providers.embeddings import decode_json
from gateway.providers.embeddings import texts_of
from gateway.providers.ollama.config import OllamaProvider


class EmbedRequest(msgspec.Struct, omit_defaults=True):
    model: str
    input: list[str]
    dimensions: int | None = None


class EmbedResponse(msgspec.Struct):
    embeddings: list[list[float]] = []
    prompt_eval_count: int | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(EmbedResponse)


class OllamaEmbeddings:
    """The `ollama` kind."""

    token_source = no_token_source
    takes_token_ids = False

    def __init__(self, provider: OllamaProvider) -> None:
        self._url = effective_base_url(provider) + "/api/embed"

    def plan(self, call: EmbeddingsCall) -> list[Part]:
        texts = texts_of(call)
        headers = {"Content-Type": "application/json"}
        if call.key is not None and call.key.key:
            headers["Authorization"] = "Bearer " + call.key.key.reveal()
        body = _encoder.encode(EmbedRequest(call.model, texts, call.dimensions))
        request = UpstreamRequest(url=self._url, headers=headers, body=body)
        return [Part(request=request, start=0, count=len(texts))]

    def parse(
        self, call: EmbeddingsCall, part: Part, body: bytes, headers: Mapping[str, str]
    ) -> PartResult:
        answer = decode_json(_decoder, body, "embed answer")
        return PartResult(vectors=answer.embeddings, prompt_tokens=answer.prompt_eval_count)
