"""The deviations of OpenAI-compatible servers, as a real client ends up seeing them."""

from __future__ import annotations

import json

import openai

from tests.e2e.conftest import Gateway
from tests.upstreams.openai_upstream import EXPECTED_ARGS

HI = [{"role": "user", "content": "hi"}]


def test_quirky_server_gives_a_clean_stream(gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=gateway.v1, api_key="k", max_retries=0, timeout=20)
    chunks = list(
        client.chat.completions.create(
            model="up/compat-quirks",
            messages=HI,
            stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )
    )
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1  # usage on every upstream chunk: only the last reaches the client
    assert chunks[-1].usage is not None
    assert chunks[-1].choices == []
    assert (chunks[-1].usage.completion_tokens, chunks[-1].usage.total_tokens) == (40, 49)
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        for c in chunks
        if c.choices
    )
    assert reasoning == "Let me think."
    with client.chat.completions.stream(model="up/compat-quirks", messages=HI) as stream:  # type: ignore[arg-type]
        final = stream.get_final_completion()
    message = final.choices[0].message
    calls = message.tool_calls or []
    assert len(calls) == 1
    assert calls[0].id == "call_q"  # not "call_qcall_qcall_q..."
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == EXPECTED_ARGS["get_weather"]
    assert final.choices[0].finish_reason == "tool_calls"  # the server said "stop"
    assert message.content == "Checking."
