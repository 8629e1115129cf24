"""What of a request's or response's body the request log keeps (`request_log.bodies`):
off -> nothing; full -> the text with every secret cut; redacted -> the JSON structure with
only structural strings kept. The JSON is decoded before secrets are cut, so a secret written
with \\u escapes in the raw body is caught too. Bodies are capped at MAX_BODY_CHARS."""

from __future__ import annotations

from typing import Any

import msgspec

MAX_BODY_CHARS = 64 * 1024
CUT = "***"
KEPT_KEYS = frozenset(
    {
        "model", "role", "type", "name", "id", "tool_call_id", "call_id",
        "finish_reason", "object", "stop_reason", "status",
    }
)  # fmt: skip
_encoder = msgspec.json.Encoder()


def _cut(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, CUT)
    return text


def _redact(value: Any, secrets: list[str], key: str | None) -> Any:
    if isinstance(value, str):
        if key in KEPT_KEYS:
            return _cut(value, secrets)
        return f"[redacted {len(value)} chars]"
    if isinstance(value, dict):
        return {_cut(k, secrets): _redact(v, secrets, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, secrets, key) for v in value]
    return value


def _full(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return _cut(value, secrets)
    if isinstance(value, dict):
        return {_cut(k, secrets): _full(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_full(v, secrets) for v in value]
    return value


def _capped(text: str) -> str:
    if len(text) <= MAX_BODY_CHARS:
        return text
    return text[:MAX_BODY_CHARS] + f"...[cut, {len(text)} chars]"


def body_for_log(raw: bytes | str | None, mode: str, secrets: list[str]) -> str | None:
    """The body as the log keeps it under `mode` (off | redacted | full)."""
    if raw is None or mode == "off":
        return None
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        if mode == "redacted":
            return f"[not JSON, {len(raw)} bytes]"
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        # Cut before capping so no secret is left half-visible at the cap.
        return _capped(_cut(text, secrets))
    kept = _redact(value, secrets, None) if mode == "redacted" else _full(value, secrets)
    # The re-encoded text is cut again: a secret could span two joined values only in raw text.
    return _capped(_cut(_encoder.encode(kept).decode(), secrets))
