"""Embeddings on the Gemini API (`gemini` kind). Sans-IO.

Gemini API: `POST {base_url}/v1beta/models/{model}:batchEmbedContents` with the key in
`x-goog-api-key`; the body is `{"requests": [{"model": "models/{model}", "content": {"parts":
[{"text": ...}]}, "outputDimensionality"?}]}` and the answer `{"embeddings": [{"values":
[...]}]}` in request order. A batch takes at most 100 requests, so longer inputs are split.
The answer carries no token count: usage is estimated (about four characters per token).

`dimensions` becomes `outputDimensionality` (the upstream rejects values its model does not
support).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from gateway.config_base import ProviderKey
from gateway.providers.base import TokenSource
from gateway.providers.base import path_segment
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import Part
from gateway.providers.embeddings import PartResult
from gateway.providers.embeddings import batched_parts
from gateway.providers.embeddings import decode_json
from gateway.providers.embeddings import texts_of
from gateway.providers.gemini.adapter import gemini_auth
from gateway.providers.gemini.adapter import gemini_source
from gateway.providers.gemini.config import GeminiProvider

GEMINI_BATCH = 100


class TextPart(msgspec.Struct):
    text: str


class Content(msgspec.Struct):
    parts: list[TextPart]


class EmbedContentRequest(msgspec.Struct, rename="camel", omit_defaults=True):
    model: str
    content: Content
    output_dimensionality: int | None = None


class BatchEmbedContentsRequest(msgspec.Struct):
    requests: list[EmbedContentRequest]


class ContentEmbedding(msgspec.Struct):
    values: list[float] = []


class BatchEmbedContentsResponse(msgspec.Struct):
    embeddings: list[ContentEmbedding] = []


_encoder = msgspec.json.Encoder()
_gemini_decoder = msgspec.json.Decoder(BatchEmbedContentsResponse)


def model_path(model: str) -> str:
    return path_segment(model.removeprefix("models/"), safe="-._~@")


class GeminiEmbeddings:
    """The `gemini` kind."""

    takes_token_ids = False

    def __init__(self, provider: GeminiProvider) -> None:
        self._provider = provider
        self._base = provider.models_url()

    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        return gemini_source(self._provider, key)

    def plan(self, call: EmbeddingsCall) -> list[Part]:
        texts = texts_of(call)
        url = self._base + model_path(call.model) + ":batchEmbedContents"
        headers = {"Content-Type": "application/json", **gemini_auth(call.key, call.credential)}
        name = "models/" + call.model.removeprefix("models/")

        def body_of(batch: list[str]) -> bytes:
            requests = [
                EmbedContentRequest(
                    model=name, content=Content([TextPart(text)]), output_dimensionality=dims
                )
                for text in batch
            ]
            return _encoder.encode(BatchEmbedContentsRequest(requests))

        dims = call.dimensions
        return batched_parts(texts, GEMINI_BATCH, url, headers, body_of)

    def parse(
        self, call: EmbeddingsCall, part: Part, body: bytes, headers: Mapping[str, str]
    ) -> PartResult:
        answer = decode_json(_gemini_decoder, body, "batchEmbedContents answer")
        return PartResult(vectors=[e.values for e in answer.embeddings], prompt_tokens=None)
