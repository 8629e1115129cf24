"""Embeddings on Vertex AI (`vertex` kind). Sans-IO.

Vertex AI: `POST {base_url}/v1/projects/{project}/locations/{region}/publishers/google/models/
{model}:predict` with the OAuth token as a bearer; the body is `{"instances": [{"content":
...}], "parameters"?: {"outputDimensionality"}}` and the answer `{"predictions":
[{"embeddings": {"values": [...], "statistics": {"token_count", "truncated"}}}]}`: usage is
the sum of the token counts. A call takes at most 250 instances, and Gemini embedding models
(`gemini-embedding-*`) only one, so the inputs are split accordingly.

`dimensions` becomes `outputDimensionality` (the upstream rejects values its model does not
support).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from gateway.config_base import ProviderKey
from gateway.providers.base import TokenSource
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import Part
from gateway.providers.embeddings import PartResult
from gateway.providers.embeddings import batched_parts
from gateway.providers.embeddings import decode_json
from gateway.providers.embeddings import texts_of
from gateway.providers.gemini.adapter import bearer_headers
from gateway.providers.gemini.embeddings import model_path
from gateway.providers.vertex.adapter import vertex_source
from gateway.providers.vertex.config import VertexProvider

VERTEX_BATCH = 250


class VertexInstance(msgspec.Struct):
    content: str


class VertexParameters(msgspec.Struct, rename="camel"):
    output_dimensionality: int


class VertexPredictRequest(msgspec.Struct, omit_defaults=True):
    instances: list[VertexInstance]
    parameters: VertexParameters | None = None


class VertexStatistics(msgspec.Struct):
    token_count: int | float | None = None
    truncated: bool | None = None


class VertexEmbeddingValues(msgspec.Struct):
    values: list[float] = []
    statistics: VertexStatistics | None = None


class VertexPrediction(msgspec.Struct):
    embeddings: VertexEmbeddingValues


class VertexPredictResponse(msgspec.Struct):
    predictions: list[VertexPrediction] = []


_encoder = msgspec.json.Encoder()
_vertex_decoder = msgspec.json.Decoder(VertexPredictResponse)


class VertexAIEmbeddings:
    """The `vertex` kind."""

    takes_token_ids = False

    def __init__(self, provider: VertexProvider) -> None:
        self._provider = provider
        self._base = provider.models_url()

    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        return vertex_source(self._provider, key)

    def plan(self, call: EmbeddingsCall) -> list[Part]:
        texts = texts_of(call)
        auth = bearer_headers(call.credential, "the Vertex AI credentials")
        url = self._base + model_path(call.model) + ":predict"
        headers = {"Content-Type": "application/json", **auth}
        size = 1 if call.model.startswith("gemini-embedding") else VERTEX_BATCH
        parameters = None
        if call.dimensions is not None:
            parameters = VertexParameters(output_dimensionality=call.dimensions)
        return batched_parts(
            texts,
            size,
            url,
            headers,
            lambda batch: _encoder.encode(
                VertexPredictRequest([VertexInstance(text) for text in batch], parameters)
            ),
        )

    def parse(
        self, call: EmbeddingsCall, part: Part, body: bytes, headers: Mapping[str, str]
    ) -> PartResult:
        answer = decode_json(_vertex_decoder, body, "predict answer")
        vectors = [p.embeddings.values for p in answer.predictions]
        counts = [
            p.embeddings.statistics.token_count if p.embeddings.statistics is not None else None
            for p in answer.predictions
        ]
        tokens = None if None in counts else sum(int(c or 0) for c in counts)
        return PartResult(vectors=vectors, prompt_tokens=tokens)
