"""Seed inputs for the fuzz targets: the recorded upstream streams and small valid answers.

Every target reads its input as `[cut seed byte] + payload` (see `contract.pieces`), so a
seed is a payload with a cut byte in front.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures import FIXTURES


def _read(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def _jsonl_as_sse(name: str) -> bytes:
    """A recording of data payloads only (one JSON a line) as an SSE body."""
    lines = [line for line in _read(name).splitlines() if line.strip()]
    return b"".join(b"data: " + line + b"\n\n" for line in lines)


def _glob(pattern: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted(Path(FIXTURES).glob(pattern))]


def stream_fixtures() -> dict[str, list[bytes]]:
    """Recorded upstream bodies by the stream target that reads them."""
    return {
        "openai_chat": _glob("openai_chat_*.sse"),
        "openai_responses": _glob("openai_responses_*.sse"),
        "anthropic": [
            *_glob("anthropic_*.sse"),
            _jsonl_as_sse("anthropic_text_tool_then_server_tool.data.jsonl"),
            _jsonl_as_sse("anthropic_tool_no_args.data.jsonl"),
        ],
        "gemini": _glob("gemini_*.sse"),
        "ollama": _glob("*.ndjson"),
        "bedrock": _glob("*.eventstream"),
    }


def error_bodies() -> list[tuple[int, bytes]]:
    """(status, body) of the recorded upstream error answers."""
    entries = json.loads(_read("error_bodies.json"))
    return [
        (
            int(e["_status"]) if str(e["_status"]).isdecimal() else 500,
            json.dumps(e["body"]).encode(),
        )
        for e in entries
    ]


# Small valid non-streaming answers, one per dialect, for the unary targets.
UNARY_BODIES: dict[str, bytes] = {
    "openai": json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
    ).encode(),
    "responses": json.dumps(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": "gpt-4o",
            "output": [
                {
                    "type": "message",
                    "id": "msg_1",
                    "content": [{"type": "output_text", "text": "hi"}],
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "f",
                    "arguments": "{}",
                },
                {"type": "reasoning", "id": "rs_1", "summary": [{"text": "why"}]},
            ],
            "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
        }
    ).encode(),
    "anthropic": json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "model": "claude",
            "role": "assistant",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "thinking", "thinking": "hmm"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 3, "output_tokens": 1},
        }
    ).encode(),
    "gemini": json.dumps(
        {
            "candidates": [
                {
                    "content": {
                        "parts": [{"text": "hi"}, {"functionCall": {"name": "f", "args": {}}}]
                    },
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1},
            "modelVersion": "gemini-2.0-flash",
        }
    ).encode(),
    "ollama": json.dumps(
        {
            "model": "qwen",
            "message": {
                "role": "assistant",
                "content": "hi",
                "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
            },
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 3,
            "eval_count": 1,
        }
    ).encode(),
    "bedrock": json.dumps(
        {
            "output": {
                "message": {
                    "role": "assistant",
                    "content": [
                        {"text": "hi"},
                        {"toolUse": {"toolUseId": "t1", "name": "f", "input": {"a": 1}}},
                    ],
                }
            },
            "stopReason": "tool_use",
            "usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4},
        }
    ).encode(),
}

EMBEDDINGS_BODIES: dict[str, bytes] = {
    "openai": b'{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]},'
    b'{"object":"embedding","index":1,"embedding":"AAAAAAAAgD8="}],"usage":{"prompt_tokens":2}}',
    "gemini": b'{"embeddings":[{"values":[0.1,0.2]},{"values":[0.3,0.4]}]}',
    "vertex": b'{"predictions":[{"embeddings":{"values":[0.1],"statistics":{"token_count":2}}},'
    b'{"embeddings":{"values":[0.2],"statistics":{"token_count":1}}}]}',
    "titan": b'{"embedding":[0.1,0.2],"inputTextTokenCount":2}',
    "cohere": b'{"embeddings":{"float":[[0.1],[0.2]]},"meta":{"billed_units":{"input_tokens":2}}}',
    "ollama": b'{"model":"m","embeddings":[[0.1],[0.2]],"prompt_eval_count":2}',
}

MESSAGES_REQUESTS: list[bytes] = [
    json.dumps(
        {
            "model": "m",
            "max_tokens": 4096,
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "x"}}],
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "calling"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
                        },
                    ],
                },
            ],
            "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "f"},
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "metadata": {"user_id": "u"},
            "stop_sequences": ["x"],
        }
    ).encode(),
    b'{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"stream":true}',
]

RESPONSES_REQUESTS: list[bytes] = [
    json.dumps(
        {
            "model": "m",
            "instructions": "be brief",
            "input": [
                {"type": "message", "role": "user", "content": "hi"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "calling"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "and"},
                        {"type": "input_image", "image_url": "data:image/png;base64,AA"},
                    ],
                },
            ],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {}}},
            "reasoning": {"effort": "low"},
            "max_output_tokens": 100,
        }
    ).encode(),
    b'{"model":"m","input":"hi","stream":true,"temperature":0.5}',
]
