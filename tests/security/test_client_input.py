"""Client input the gateway refuses, through a real gateway process: image/file URLs that are
not http(s) or data: (a `gs://` URL would be read by Gemini/Vertex with the gateway's own
identity) unless the provider sets `allow_storage_uris`, and model ids with path dot
segments, on every route. A refused request reaches no upstream.

Gemini providers point at the fake Gemini upstream (which records every request); the
azure, openai and anthropic providers at the recorder (tests/security/recorder.py), which
records every path it is sent, so a request built from `..` would show there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.security.recorder import Recorder
from tests.upstreams.gemini_upstream import FakeGemini

pytestmark = pytest.mark.e2e

GS = "gs://operator-bucket/secret.png"
DOT_MODELS = ["..", ".", "azure/..", "azure/%2e%2e", "azure/%252E%252E", "oa/a/../../b", "an/.."]


@dataclass
class Rig:
    gw: Gateway
    gemini: FakeGemini
    recorder: Recorder

    def seen(self) -> int:
        return len(self.gemini.requests) + len(self.recorder.seen)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    gemini = FakeGemini().start()
    recorder = Recorder().start()
    rec = recorder.base_url
    config = f"""
store: {{url: "memory://"}}
providers:
  - {{name: gem, kind: gemini, base_url: "{gemini.base_url}", keys: [{{key: gk-1}}]}}
  - {{name: gemopen, kind: gemini, base_url: "{gemini.base_url}", keys: [{{key: gk-2}}],
      allow_storage_uris: true}}
  - {{name: azure, kind: azure, base_url: "{rec}/az", api_version: "2024-10-21",
      keys: [{{key: az-key}}]}}
  - {{name: oa, kind: openai, base_url: "{rec}/oa/v1", keys: [{{key: sk-oa}}]}}
  - {{name: an, kind: anthropic, base_url: "{rec}/an", keys: [{{key: sk-ant}}]}}
models:
  - {{name: mixed, targets: [{{provider: gemopen, model: text}}, {{provider: gem, model: text}}]}}
  - {{name: native-responses, targets: [{{provider: oa, model: gpt-x, api: responses}}]}}
  - {{name: "..", targets: [{{provider: oa, model: gpt-x}}]}}
"""
    gw = start_gateway(config, tmp_path_factory.mktemp("gw-client-input"))
    try:
        yield Rig(gw, gemini, recorder)
    finally:
        stop_gateway(gw)
        recorder.stop()
        gemini.stop()


def post(rig: Rig, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    response = httpx.post(rig.gw.v1 + path, json=body, timeout=20)
    return response.status_code, response.json()


def chat_image(model: str, url: str = GS) -> dict[str, Any]:
    parts = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    return {"model": model, "messages": [{"role": "user", "content": parts}]}


def assert_openai_400(answer: Any, param: str, code: str) -> None:
    error = answer["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["code"] == code


@pytest.mark.parametrize("model", ["gem/text", "mixed", "oa/gpt-x", "azure/dep"])
@pytest.mark.parametrize(
    "url", [GS, " GS://operator-bucket/x", "s3://b/k.png", "file:///etc/passwd"]
)
def test_chat_storage_url_is_refused_and_nothing_is_sent(rig: Rig, model: str, url: str) -> None:
    before = rig.seen()
    status, answer = post(rig, "/chat/completions", chat_image(model, url))
    assert status == 400, answer
    assert_openai_400(answer, "messages[0].content[1].image_url.url", "unsupported_url_scheme")
    assert rig.seen() == before


def test_a_storage_url_reaches_gemini_only_where_the_provider_allows_it(rig: Rig) -> None:
    before = len(rig.gemini.requests)
    status, answer = post(rig, "/chat/completions", chat_image("gem/text"))
    assert status == 400, answer
    assert len(rig.gemini.requests) == before

    status, answer = post(rig, "/chat/completions", chat_image("gemopen/text"))
    assert status == 200, answer
    (sent,) = rig.gemini.requests[before:]
    parts = sent.body["contents"][0]["parts"]
    assert {"fileData": {"fileUri": GS, "mimeType": "image/png"}} in parts
    assert sent.headers["x-goog-api-key"] == "gk-2"

    # an https image is a fileUri on either provider, as before
    status, answer = post(rig, "/chat/completions", chat_image("gem/text", "https://x.test/a.png"))
    assert status == 200, answer
    sent = rig.gemini.requests[-1]
    assert sent.body["contents"][0]["parts"][1]["fileData"]["fileUri"] == "https://x.test/a.png"


@pytest.mark.parametrize("model", ["gem/text", "native-responses"])
def test_responses_input_image_storage_url_is_refused(rig: Rig, model: str) -> None:
    before = rig.seen()
    content = [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": GS}]
    body = {"model": model, "input": [{"role": "user", "content": content}]}
    status, answer = post(rig, "/responses", body)
    assert status == 400, answer
    assert_openai_400(answer, "input[0].content[1].image_url", "unsupported_url_scheme")
    assert rig.seen() == before


@pytest.mark.parametrize("path", ["/messages", "/messages/count_tokens"])
@pytest.mark.parametrize(
    ("model", "kind"),
    [("gem/text", "image"), ("an/claude-x", "image"), ("an/claude-x", "document")],
)
def test_messages_url_source_storage_url_is_refused_in_anthropic_shape(
    rig: Rig, model: str, kind: str, path: str
) -> None:
    before = rig.seen()
    block = {"type": kind, "source": {"type": "url", "url": GS}}
    body = {
        "model": model,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, block]}],
    }
    status, answer = post(rig, path, body)
    assert status == 400, answer
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "invalid_request_error"
    assert answer["error"]["message"].startswith("messages[0].content[1].source.url")
    assert rig.seen() == before


@pytest.mark.parametrize("model", DOT_MODELS)
def test_dot_segment_models_are_refused_on_every_route(rig: Rig, model: str) -> None:
    hi = [{"role": "user", "content": "hi"}]
    routes: list[tuple[str, dict[str, Any]]] = [
        ("/chat/completions", {"model": model, "messages": hi}),
        ("/chat/completions", {"model": model, "messages": hi, "stream": True}),
        ("/embeddings", {"model": model, "input": "hi"}),
        ("/responses", {"model": model, "input": "hi"}),
        ("/messages", {"model": model, "max_tokens": 8, "messages": hi}),
        ("/messages/count_tokens", {"model": model, "messages": hi}),
    ]
    for path, body in routes:
        before = rig.seen()
        status, answer = post(rig, path, body)
        assert status == 400, (path, model, answer)
        if path.startswith("/messages"):
            assert answer["type"] == "error", answer
            assert answer["error"]["message"].startswith("model"), answer
        else:
            assert_openai_400(answer, "model", "invalid_model")
        assert rig.seen() == before, (path, model)
