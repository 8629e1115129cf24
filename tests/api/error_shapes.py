"""The error shape of each route, as clients parse it: Anthropic's
`{"type": "error", "error": {"type", "message"}}` under /v1/messages, OpenAI's
`{"error": {"message", "type", "param", "code"}}` everywhere else, always JSON."""

from __future__ import annotations

import json
from typing import Any


def openai_shaped(body: Any) -> bool:
    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(body["error"], dict):
        return False
    error = body["error"]
    return (
        {"message", "type", "param", "code"} <= set(error)
        and isinstance(error["message"], str)
        and isinstance(error["type"], str | None)
        and isinstance(error["param"], str | None)
        and isinstance(error["code"], str | int | None)
    )


def anthropic_shaped(body: Any) -> bool:
    if not isinstance(body, dict) or body.get("type") != "error":
        return False
    error = body.get("error")
    return (
        isinstance(error, dict)
        and isinstance(error.get("type"), str)
        and isinstance(error.get("message"), str)
    )


def error_shape_problem(path: str, status: int, content_type: str, content: bytes) -> str | None:
    """Why an error answer on `path` is not in that route's shape, or None when it is."""
    if status < 400:
        return None
    if content_type.split(";")[0].strip() != "application/json":
        return f"{status} with content-type {content_type!r}, not application/json"
    try:
        body = json.loads(content)
    except ValueError:
        return f"{status} whose body is not JSON: {content[:200]!r}"
    anthropic = path == "/v1/messages" or path.startswith("/v1/messages/")
    shaped = anthropic_shaped(body) if anthropic else openai_shaped(body)
    if not shaped:
        shape = "Anthropic" if anthropic else "OpenAI"
        return f"{status} not in the {shape} error shape: {body!r}"
    return None
