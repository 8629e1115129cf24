"""A fake OpenAI embeddings upstream whose vectors mean something: a text's words
(lower-cased, punctuation dropped), each hashed (sha256) into one of DIMENSIONS, counted.
Two texts with the same words get the same vector (cosine 1.0); sharing most words, a high
similarity; none, about 0. Enough for the response cache's semantic mode to be tested
against the wire format a real embeddings model answers in.

`down = True` makes it answer HTTP 500 (OpenAI's error shape). Every input is recorded.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from aiohttp import web

from tests.upstreams.threaded import ThreadedUpstream

DIMENSIONS = 256
_WORD = re.compile(r"[a-z0-9]+")


def words_vector(text: str) -> list[float]:
    vector = [0.0] * DIMENSIONS
    for word in _WORD.findall(text.lower()):
        vector[hashlib.sha256(word.encode()).digest()[0]] += 1.0
    return vector


def cosine(a: str, b: str) -> float:
    x, y = words_vector(a), words_vector(b)
    dot = sum(p * q for p, q in zip(x, y, strict=True))
    return dot / (math.sqrt(sum(p * p for p in x)) * math.sqrt(sum(q * q for q in y)))


class WordsEmbeddings(ThreadedUpstream):
    name = "words-embeddings"
    base_path = "/v1"

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[str] = []
        self.down = False

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/embeddings", self._embeddings)

    async def _embeddings(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.inputs.extend(texts)
        if self.down:
            error = {"message": "down", "type": "server_error", "param": None, "code": None}
            return web.json_response({"error": error}, status=500)
        tokens = sum(len(t.split()) for t in texts)
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": words_vector(t)}
                    for i, t in enumerate(texts)
                ],
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )
