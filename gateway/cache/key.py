"""The canonical cache key: two requests that mean the same answer share it, two that could
be answered differently never do.

Sans-IO, pure functions. The key is the sha256 of one JSON document whose keys are sorted:
the key's version, the inbound API, the namespace (a virtual key's, the master key's, or one
shared), the resolved model (its name and every target it may be served by), the canonical
chat request normalised, and the client's own request (for upstreams that speak its API)
normalised. Normalising drops what does not shape the answer (`stream`, `stream_options`,
`user`, `metadata`, `store`, ...) and makes the defaults explicit (an absent or null
`temperature` is 1.0, an absent `tool_choice` is `auto` with tools and `none` without,
`max_tokens` is `max_completion_tokens`, a lone `stop` string is a list, ...), so that
spelling a default out or leaving it out, or reordering keys, changes nothing.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

VERSION = 1

# Fields that never change the answer: how it is delivered, who asks, what is kept of it.
_NOT_SHAPING = frozenset(
    {
        "stream",
        "stream_options",
        "user",
        "metadata",
        "store",
        "service_tier",
        "prompt_cache_key",
        "safety_identifier",
    }
)
# The OpenAI defaults, spelled out (a request that sends them means the same as one that
# does not).
_CHAT_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "n": 1,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "logprobs": False,
}
_FLOATS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
_EMPTY_IS_ABSENT = ("tools", "logit_bias", "stop")

_encoder = msgspec.json.Encoder(order="sorted")


def _without_nulls(value: Any) -> Any:
    """`null` means "the default" in these APIs: the same as the field left out."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def normalised_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The canonical chat request as far as it shapes the answer, defaults explicit."""
    out: dict[str, Any] = {
        k: v for k, v in _without_nulls(body).items() if k not in _NOT_SHAPING and k != "model"
    }
    for name in _EMPTY_IS_ABSENT:
        if out.get(name) in ([], {}, ""):
            del out[name]
    for name, default in _CHAT_DEFAULTS.items():
        out.setdefault(name, default)
    for name in _FLOATS:
        value = out[name]
        if isinstance(value, int) and not isinstance(value, bool):
            out[name] = float(value)
    if "max_tokens" in out:
        out.setdefault("max_completion_tokens", out.pop("max_tokens"))
        out.pop("max_tokens", None)
    if isinstance(out.get("stop"), str):
        out["stop"] = [out["stop"]]
    tools = "tools" in out
    out.setdefault("tool_choice", "auto" if tools else "none")
    if tools:
        out.setdefault("parallel_tool_calls", True)
    else:
        out.pop("parallel_tool_calls", None)
    if out.get("response_format") == {"type": "text"}:
        del out["response_format"]
    if not out["logprobs"]:
        out.pop("top_logprobs", None)
    return out


def normalised_native(body: dict[str, Any]) -> dict[str, Any]:
    """The client's own request (Responses, Messages) as far as it shapes the answer."""
    return {k: v for k, v in _without_nulls(body).items() if k not in _NOT_SHAPING and k != "model"}


def cache_key(
    *,
    api: str,
    namespace: str,
    model: str,
    targets: list[str],
    chat: dict[str, Any],
    native: dict[str, Any] | None = None,
) -> str:
    """The entry's key (hex sha256): see the module docstring for what goes in."""
    document = {
        "v": VERSION,
        "api": api,
        "ns": namespace,
        "model": model,
        "targets": sorted(targets),
        "chat": normalised_chat(chat),
        "native": normalised_native(native) if native is not None else None,
    }
    return hashlib.sha256(_encoder.encode(document)).hexdigest()
