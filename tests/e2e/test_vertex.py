"""Real clients through a running gateway to Vertex AI (the fake Gemini upstream under the
Vertex path, with a fake OAuth token endpoint)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.gemini_upstream import CALLS
from tests.upstreams.gemini_upstream import TEXT_PIECES
from tests.upstreams.gemini_upstream import FakeGemini
from tests.vertex_credentials import service_account_file

HI = [{"role": "user", "content": "hi"}]
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name, _ in CALLS
]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGemini]:
    upstream = FakeGemini().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gw(fake: FakeGemini, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("gw-vertex")
    credentials = service_account_file(folder, fake.base_url + "/token")
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
providers:
  - name: vx
    kind: vertex
    base_url: {fake.base_url}
    project: test-project
    region: europe-west4
    keys: [{{credentials_file: "{credentials}"}}]
"""
    gateway = start_gateway(config, folder)
    yield gateway
    stop_gateway(gateway)


def test_text_and_tools_through_vertex(gw: Gateway, fake: FakeGemini) -> None:
    client = openai.OpenAI(base_url=gw.v1, api_key="k", max_retries=0, timeout=20)
    pieces = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(model="vx/text", messages=HI, stream=True)
        if c.choices
    ]  # type: ignore[call-overload]
    assert "".join(pieces) == "".join(TEXT_PIECES)
    with client.chat.completions.stream(
        model="vx/parallel-2",
        messages=HI,  # type: ignore[arg-type]
        tools=TOOLS,
    ) as stream:  # type: ignore[arg-type]
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == CALLS
    unary = client.chat.completions.create(model="vx/text", messages=HI)  # type: ignore[arg-type]
    assert unary.choices[0].message.content == "".join(TEXT_PIECES)

    recorded = fake.requests[-3:]
    assert recorded[0].path.startswith(
        "/v1/projects/test-project/locations/europe-west4/publishers/google/models/"
        "text:streamGenerateContent?alt=sse"
    )
    assert all(r.headers["Authorization"] == "Bearer ya29.fake-1" for r in recorded)
    assert all("x-goog-api-key" not in {k.lower() for k in r.headers} for r in recorded)
    assert len(fake.token_requests) == 1  # one token, cached across requests
