"""Embeddings on Google: the Gemini API (`gemini` kind) and Vertex AI (`vertex` kind). Sans-IO.

Gemini API: `POST {base_url}/v1beta/models/{model}:batchEmbedContents` with the key in
`x-goog-api-key`; the body is `{"requests": [{"model": "models/{model}", "content": {"parts":
[{"text": ...}]}, "outputDimensionality"?}]}` and the answer `{"embeddings": [{"values":
[...]}]}` in request order. A batch takes at most 100 requests, so longer inputs are split.
The answer carries no token count: usage is estimated (about four characters per token).

Vertex AI: `POST {base_url}/v1/projects/{project}/locations/{region}/publishers/google/models/
{model}:predict` with the OAuth token as a bearer; the body is `{"instances": [{"content":
...}], "parameters"?: {"outputDimensionality"}}` and the answer `{"predictions":
[{"embeddings": {"values": [...], "statistics": {"token_count", "truncated"}}}]}`: usage is
the sum of the token counts. A call takes at most 250 instances, and Gemini embedding models
(`gemini-embedding-*`) only one, so the inputs are split accordingly.

`dimensions` becomes `outputDimensionality` on both (the upstream rejects values its model
does not support).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

import msgspec

from gateway.config import ProviderConfig, effective_base_url
from gateway.errors import UpstreamConnectError
from gateway.providers.base import UpstreamRequest, path_segment
from gateway.providers.embeddings import (
    EmbeddingsCall,
    Part,
    PartResult,
    batches,
    decode_json,
    texts_of,
)

GEMINI_BATCH = 100
VERTEX_BATCH = 250


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
_gemini_decoder = msgspec.json.Decoder(BatchEmbedContentsResponse)
_vertex_decoder = msgspec.json.Decoder(VertexPredictResponse)


def model_path(model: str) -> str:
    return path_segment(model.removeprefix("models/"), safe="-._~@")


class GeminiEmbeddings:
    """The `gemini` kind."""

    needs_access_token = False
    takes_token_ids = False

    def __init__(self, provider: ProviderConfig) -> None:
        self._base = effective_base_url(provider) + "/v1beta/models/"

    def plan(self, call: EmbeddingsCall) -> list[Part]:
        texts = texts_of(call)
        url = self._base + model_path(call.model) + ":batchEmbedContents"
        headers = {"Content-Type": "application/json"}
        if call.key is not None and call.key.key:
            headers["x-goog-api-key"] = call.key.key.reveal()
        name = "models/" + call.model.removeprefix("models/")
        parts = []
        for start, count in batches(len(texts), GEMINI_BATCH):
            requests = [
                EmbedContentRequest(
                    model=name,
                    content=Content([TextPart(text)]),
                    output_dimensionality=call.dimensions,
                )
                for text in texts[start : start + count]
            ]
            body = _encoder.encode(BatchEmbedContentsRequest(requests))
            request = UpstreamRequest(url=url, headers=dict(headers), body=body)
            parts.append(Part(request=request, start=start, count=count))
        return parts

    def parse(
        self, call: EmbeddingsCall, part: Part, body: bytes, headers: Mapping[str, str]
    ) -> PartResult:
        answer = decode_json(_gemini_decoder, body, "batchEmbedContents answer")
        return PartResult(vectors=[e.values for e in answer.embeddings], prompt_tokens=None)


class VertexAIEmbeddings:
    """The `vertex` kind."""

    needs_access_token = True
    takes_token_ids = False

    def __init__(self, provider: ProviderConfig) -> None:
        project = quote(provider.project or "", safe="")
        region = quote(provider.region or "", safe="")
        self._base = (
            f"{effective_base_url(provider)}/v1/projects/{project}/locations/{region}"
            "/publishers/google/models/"
        )

    def plan(self, call: EmbeddingsCall) -> list[Part]:
        texts = texts_of(call)
        if not call.access_token:
            raise UpstreamConnectError("no access token for the Vertex AI credentials")
        url = self._base + model_path(call.model) + ":predict"
        headers = {
            "Content-Type": "application/json",
            "Authorization": "Bearer " + call.access_token,
        }
        size = 1 if call.model.startswith("gemini-embedding") else VERTEX_BATCH
        parameters = None
        if call.dimensions is not None:
            parameters = VertexParameters(output_dimensionality=call.dimensions)
        parts = []
        for start, count in batches(len(texts), size):
            instances = [VertexInstance(text) for text in texts[start : start + count]]
            body = _encoder.encode(VertexPredictRequest(instances, parameters))
            request = UpstreamRequest(url=url, headers=dict(headers), body=body)
            parts.append(Part(request=request, start=start, count=count))
        return parts

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
