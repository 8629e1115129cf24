"""Embeddings on AWS Bedrock through InvokeModel: `POST {base_url}/model/{model}/invoke`,
signed with SigV4 for `aws_access_key_id` keys or sent with `Authorization: Bearer` for
Bedrock API keys (as providers/bedrock/adapter.py does for chat). Sans-IO.

Two model families, told apart by the model id (inference-profile prefixes such as `us.` are
fine):

- Amazon Titan text embeddings (`amazon.titan-embed-text-v1`, `-v2:0`, ...) take one
  `inputText` per call and answer `{"embedding": [...], "inputTextTokenCount": n}`: a request
  with several inputs becomes one call per input (sent concurrently by the handler, merged in
  input order). `dimensions` is sent as Titan v2's `dimensions` (256, 512 or 1024); other
  Titan models reject it with a 400.
- Cohere embed (`cohere.embed-english-v3`, `cohere.embed-multilingual-v3`,
  `cohere.embed-v4:0`) take up to 96 `texts` per call and an `input_type`: the client's
  `input_type` field when it sends one (a gateway extension), else `search_document`. The
  answer's `embeddings` is a list of vectors, or `{"float": [...]}` when embedding types were
  asked for (v4, which also takes `dimensions` as `output_dimension`; v3 rejects it with a
  400). Usage is `meta.billed_units.input_tokens` when present, else Bedrock's
  `x-amzn-bedrock-input-token-count` header, else estimated.

Any other model id is a 400: the gateway does not know its request format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.config_base import ProviderKey
from gateway.config_base import effective_base_url
from gateway.errors import BadRequest
from gateway.providers.base import TokenSource
from gateway.providers.base import UpstreamRequest
from gateway.providers.base import path_segment
from gateway.providers.bedrock.auth import authorized
from gateway.providers.bedrock.auth import identity_source
from gateway.providers.bedrock.config import BedrockProvider
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import Part
from gateway.providers.embeddings import PartResult
from gateway.providers.embeddings import batches
from gateway.providers.embeddings import decode_json
from gateway.providers.embeddings import no_dimensions
from gateway.providers.embeddings import texts_of

COHERE_BATCH = 96
DEFAULT_INPUT_TYPE = "search_document"
TOKEN_COUNT_HEADER = "x-amzn-bedrock-input-token-count"


class TitanRequest(msgspec.Struct, rename="camel", omit_defaults=True):
    input_text: str
    dimensions: int | None = None


class TitanResponse(msgspec.Struct, rename="camel"):
    embedding: list[float]
    input_text_token_count: int | None = None


class CohereRequest(msgspec.Struct, omit_defaults=True):
    texts: list[str]
    input_type: str
    embedding_types: list[str] | None = None
    output_dimension: int | None = None


class CohereByType(msgspec.Struct):
    floats: list[list[float]] = msgspec.field(default_factory=list, name="float")


class CohereBilledUnits(msgspec.Struct):
    input_tokens: int | None = None


class CohereMeta(msgspec.Struct):
    billed_units: CohereBilledUnits | None = None


class CohereResponse(msgspec.Struct):
    embeddings: list[list[float]] | CohereByType
    meta: CohereMeta | None = None


_encoder = msgspec.json.Encoder()
_titan_decoder = msgspec.json.Decoder(TitanResponse)
_cohere_decoder = msgspec.json.Decoder(CohereResponse)


def family(model: str) -> str:
    if "cohere.embed" in model:
        return "cohere"
    if "amazon.titan-embed" in model:
        return "titan"
    raise BadRequest(
        f"the bedrock model {model!r} is not an embeddings model the gateway knows "
        "(Amazon Titan text embeddings or Cohere embed)",
        param="model",
    )


def input_type(body: Mapping[str, Any]) -> str:
    value = body.get("input_type")
    if value is None:
        return DEFAULT_INPUT_TYPE
    if not isinstance(value, str) or not value:
        raise BadRequest("'input_type' must be a non-empty string", param="input_type")
    return value


def header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


class BedrockEmbeddings:
    """The `bedrock` kind."""

    takes_token_ids = False

    def __init__(self, provider: BedrockProvider) -> None:
        self._provider = provider
        self._base = effective_base_url(provider)
        self._region = provider.region

    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        return identity_source(self._provider, key)

    def _request(self, call: EmbeddingsCall, body: bytes) -> UpstreamRequest:
        url = f"{self._base}/model/{path_segment(call.model)}/invoke"
        headers = {"content-type": "application/json", "accept": "application/json"}
        headers = authorized(url, headers, body, call.key, self._region, call.now, call.credential)
        return UpstreamRequest(url=url, headers=headers, body=body)

    def plan(self, call: EmbeddingsCall) -> list[Part]:
        kind = family(call.model)
        texts = texts_of(call)
        if kind == "titan":
            if "titan-embed-text-v2" not in call.model:
                no_dimensions(call, "this Titan model (only Titan Text Embeddings V2 takes it)")
            return [
                Part(
                    request=self._request(
                        call, _encoder.encode(TitanRequest(text, call.dimensions))
                    ),
                    start=i,
                    count=1,
                )
                for i, text in enumerate(texts)
            ]
        v4 = "embed-v4" in call.model
        if not v4:
            no_dimensions(call, "Cohere embed v3 models")
        kind_of_input = input_type(call.body)
        parts = []
        for start, count in batches(len(texts), COHERE_BATCH):
            request = CohereRequest(
                texts=texts[start : start + count],
                input_type=kind_of_input,
                embedding_types=["float"] if v4 else None,
                output_dimension=call.dimensions if v4 else None,
            )
            parts.append(
                Part(
                    request=self._request(call, _encoder.encode(request)),
                    start=start,
                    count=count,
                )
            )
        return parts

    def parse(
        self, call: EmbeddingsCall, part: Part, body: bytes, headers: Mapping[str, str]
    ) -> PartResult:
        counted = header(headers, TOKEN_COUNT_HEADER)
        # isascii: "¹".isdigit() is true, and int("¹") raises
        from_header = int(counted) if counted and counted.isascii() and counted.isdigit() else None
        if family(call.model) == "titan":
            titan = decode_json(_titan_decoder, body, "Titan embeddings answer")
            tokens = titan.input_text_token_count
            return PartResult(
                vectors=[titan.embedding], prompt_tokens=from_header if tokens is None else tokens
            )
        cohere = decode_json(_cohere_decoder, body, "Cohere embed answer")
        embeddings = cohere.embeddings
        vectors = embeddings.floats if isinstance(embeddings, CohereByType) else embeddings
        billed = cohere.meta.billed_units if cohere.meta is not None else None
        tokens = billed.input_tokens if billed is not None else None
        return PartResult(vectors=vectors, prompt_tokens=from_header if tokens is None else tokens)
