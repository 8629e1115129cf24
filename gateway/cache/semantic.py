"""Semantic mode's pure parts (docs/cache.md, "Semantic mode"): what is embedded (the last
user turn's text), what must match exactly for a semantic hit (the context: everything else
of the request, hashed like the exact key), and the cosine search over a bucket's vectors.

Sans-IO: no store, no network. numpy is imported by this module only, and this module only
when semantic mode is configured.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from gateway.cache.key import VERSION
from gateway.cache.key import normalised_chat
from gateway.cache.key import normalised_native

Matrix = npt.NDArray[np.float32]
_encoder = msgspec.json.Encoder(order="sorted")
# the client's own conversation (Responses `input`, Messages `messages`): the chat form
# carries it, with its last user turn blanked; every other native field must match
_NATIVE_CONVERSATION = ("input", "messages")


def last_user_text(chat: dict[str, Any]) -> tuple[int, str] | None:
    """The index and text of the last message when it is the user's and only text (a
    string, or text parts); None otherwise: such a request is cached exactly only."""
    messages = chat.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                return None  # an image or a file: no text stands for it
            value = part.get("text")
            if not isinstance(value, str):
                return None
            parts.append(value)
        text = "\n".join(parts)
    else:
        return None
    text = text.strip()
    return (len(messages) - 1, text) if text else None


def context_key(
    *,
    api: str,
    namespace: str,
    model: str,
    targets: list[str],
    chat: dict[str, Any],
    native: dict[str, Any] | None,
    turn: int,
) -> str:
    """The bucket of a request: its exact key's document with the last user turn's text
    blanked (system prompt, history, tools, parameters, model and namespace still in it)."""
    blanked = dict(chat)
    messages = list(blanked["messages"])
    messages[turn] = {**copy.copy(messages[turn]), "content": ""}
    blanked["messages"] = messages
    rest = None
    if native is not None:
        rest = {k: v for k, v in normalised_native(native).items() if k not in _NATIVE_CONVERSATION}
    document = {
        "v": VERSION,
        "semantic": True,
        "api": api,
        "ns": namespace,
        "model": model,
        "targets": sorted(targets),
        "chat": normalised_chat(blanked),
        "native": rest,
    }
    return hashlib.sha256(_encoder.encode(document)).hexdigest()


def unit(vector: list[float] | Matrix) -> Matrix | None:
    """`vector` as float32 of length 1; None for a zero, empty or non-finite one."""
    array = np.asarray(vector, dtype=np.float32).reshape(-1)
    if array.size == 0 or not np.all(np.isfinite(array)):
        return None
    norm = float(np.linalg.norm(array))
    if norm == 0.0:
        return None
    return array / norm


def nearest(matrix: Matrix, query: Matrix) -> tuple[int, float] | None:
    """The row of `matrix` (unit vectors, one per row) most similar to `query` (a unit
    vector) and its cosine similarity; None when empty or of another dimension."""
    if matrix.shape[0] == 0 or matrix.shape[1] != query.shape[0]:
        return None
    scores = matrix @ query
    best = int(np.argmax(scores))
    return best, float(scores[best])


def to_bytes(vector: Matrix) -> bytes:
    return vector.astype("<f4").tobytes()


def from_bytes(data: bytes) -> Matrix:
    return np.frombuffer(data, dtype="<f4")
