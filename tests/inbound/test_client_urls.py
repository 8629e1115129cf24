"""Client image/file URLs: only http(s) and data: pass unless every planned provider allows
storage URIs; the 400 names the field in the client's own request. Also the Gemini
translation's own refusal (defence in depth)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import ProviderConfig
from gateway.errors import BadRequest
from gateway.inbound.client_urls import check_request
from gateway.inbound.client_urls import url_allowed
from gateway.providers.base import NativeRequest
from gateway.providers.base import UpstreamCall
from gateway.providers.gemini.request import build_body
from gateway.providers.registry import provider_config
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Message

GS = "gs://operator-bucket/secret.png"
REFUSED = [
    GS,
    "GS://operator-bucket/x",
    " gs://x",
    "\tgs://x",
    "\x00gs://x",
    "\u3000gs://x",
    "s3://bucket/key",
    "file:///etc/passwd",
    "FILE:///etc/passwd",
    "ftp://x.test/a.png",
    "javascript:alert(1)",
    "//evil.test/a.png",
    "operator-bucket/secret.png",
    "",
    "   ",
    "ht\ttps://x.test/a.png",
    "https:/x.test",
    "https:\\\\x.test",
    "httpx://x.test",
]
ALLOWED = [
    "https://x.test/a.png",
    "http://x.test/a.png",
    "HTTPS://X.TEST/A.PNG",
    "Http://x.test",
    " https://x.test/a.png",
    "\n\thttp://x.test",
    "data:image/png;base64,iVBORw0KGgo=",
    "DATA:image/png;base64,iVBORw0KGgo=",
]


class Attempt(msgspec.Struct, frozen=True):
    provider: ProviderConfig


def plan(*allow: bool) -> list[Attempt]:
    return [
        Attempt(provider_config(name=f"p{i}", kind="gemini", allow_storage_uris=a))
        for i, a in enumerate(allow)
    ]


def chat(content: Any, role: str = "user") -> list[Message]:
    request = msgspec.convert(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}, {"role": role, "content": content}],
        },
        ChatRequest,
    )
    return request.messages


def refused(messages: list[Message], native: NativeRequest | None = None) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        check_request(messages, native, plan(False))
    assert caught.value.status == 400
    assert caught.value.code == "unsupported_url_scheme"
    return caught.value


@pytest.mark.parametrize("url", REFUSED)
def test_other_schemes_are_refused(url: str) -> None:
    assert not url_allowed(url)


@pytest.mark.parametrize("url", ALLOWED)
def test_http_https_and_data_pass(url: str) -> None:
    assert url_allowed(url)


@given(
    st.sampled_from(["gs", "s3", "file", "ftp", "gcs", "az", "hdfs"]),
    st.text(alphabet=" \t\r\n\x00\x0b\x0c\x1f\u3000\xa0\ufeff", max_size=4),
    st.randoms(use_true_random=False),
)
def test_no_case_or_leading_whitespace_lets_a_storage_scheme_through(
    scheme: str, lead: str, rnd: Any
) -> None:
    mixed = "".join(c.upper() if rnd.random() < 0.5 else c for c in scheme)
    assert not url_allowed(f"{lead}{mixed}://operator-bucket/secret.png")


@given(
    st.sampled_from(["http://", "https://", "data:"]),
    st.text(alphabet=" \t\r\n\x00\x1f", max_size=4),
    st.randoms(use_true_random=False),
)
def test_allowed_schemes_pass_in_any_case(prefix: str, lead: str, rnd: Any) -> None:
    mixed = "".join(c.upper() if rnd.random() < 0.5 else c for c in prefix)
    assert url_allowed(f"{lead}{mixed}x.test/a.png")


def test_chat_image_url_object_and_string() -> None:
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": GS}}]
    assert refused(chat(parts)).param == "messages[1].content[1].image_url.url"
    parts = [{"type": "image_url", "image_url": GS}]
    assert refused(chat(parts)).param == "messages[1].content[0].image_url"


def test_chat_file_parts() -> None:
    file = {"type": "file", "file": {"file_data": GS, "filename": "a.pdf"}}
    assert refused(chat([file])).param == "messages[1].content[0].file.file_data"
    file = {"type": "file", "file": {"file_url": "s3://b/k.pdf"}}
    assert refused(chat([file])).param == "messages[1].content[0].file.file_url"


def test_parts_in_assistant_and_tool_messages_are_checked_too() -> None:
    image = [{"type": "image_url", "image_url": {"url": GS}}]
    for role in ("assistant", "tool", "system"):
        assert refused(chat(image, role=role)).param == "messages[1].content[0].image_url.url"
    other = {"type": "video_url", "video_url": {"url": "file:///v.mp4"}}
    assert refused(chat([other])).param == "messages[1].content[0].video_url.url"


def test_allowed_content_passes() -> None:
    parts = [
        {"type": "text", "text": "gs://not-a-url-field"},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "low"}},
        {"type": "image_url", "image_url": "data:image/png;base64,AAAA"},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,AAAA"}},
        {"type": "file", "file": {"file_data": "JVBERi0xLjQK", "filename": "bare-base64.pdf"}},
        {"type": "file", "file": {"file_id": "file-123"}},
    ]
    check_request(chat(parts), None, plan(False))
    check_request(chat("gs://just text"), None, plan(False))


def test_allowed_only_when_every_planned_provider_allows() -> None:
    messages = chat([{"type": "image_url", "image_url": {"url": GS}}])
    check_request(messages, None, plan(True))
    check_request(messages, None, plan(True, True))
    for mixed in (plan(True, False), plan(False, True), plan(False)):
        with pytest.raises(BadRequest):
            check_request(messages, None, mixed)


def test_responses_native_body() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": GS},
                ],
            },
        ],
    }
    err = refused([], NativeRequest(api="responses", body=body))
    assert err.param == "input[1].content[1].image_url"
    body["input"] = [{"role": "user", "content": [{"type": "input_file", "file_url": "s3://b/k"}]}]
    assert (
        refused([], NativeRequest(api="responses", body=body)).param
        == "input[0].content[0].file_url"
    )
    body["input"] = [
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": [{"type": "input_image", "image_url": GS}],
        }
    ]
    assert (
        refused([], NativeRequest(api="responses", body=body)).param
        == "input[0].output[0].image_url"
    )
    body["input"] = [
        {"role": "user", "content": [{"type": "input_image", "image_url": "https://x.test/a.png"}]}
    ]
    check_request([], NativeRequest(api="responses", body=body), plan(False))
    check_request([], NativeRequest(api="responses", body={"model": "m", "input": GS}), plan(False))


def test_messages_native_body() -> None:
    def body(*blocks: Any) -> NativeRequest:
        turns = [{"role": "user", "content": "hi"}, {"role": "user", "content": list(blocks)}]
        return NativeRequest(api="messages", body={"model": "m", "messages": turns})

    image = {"type": "image", "source": {"type": "url", "url": GS}}
    assert refused([], body({"type": "text", "text": "x"}, image)).param == (
        "messages[1].content[1].source.url"
    )
    document = {"type": "document", "source": {"type": "url", "url": "file:///etc/passwd"}}
    assert refused([], body(document)).param == "messages[1].content[0].source.url"
    result = {"type": "tool_result", "tool_use_id": "t", "content": [image]}
    assert refused([], body(result)).param == "messages[1].content[0].content[0].source.url"
    nested = {"type": "document", "source": {"type": "content", "content": [image]}}
    assert refused([], body(nested)).param == "messages[1].content[0].source.content[0].source.url"
    fine = {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}
    base64 = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
    }
    check_request([], body(fine, base64), plan(False))


def test_a_body_nested_beyond_anthropics_blocks_costs_nothing_more() -> None:
    block: dict[str, Any] = {"type": "text", "text": "x"}
    for _ in range(5000):
        block = {"type": "tool_result", "tool_use_id": "t", "content": [block]}
    native = NativeRequest(
        api="messages", body={"messages": [{"role": "user", "content": [block]}]}
    )
    check_request([], native, plan(False))


def gemini_call(url: str, allow: bool) -> UpstreamCall:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
        ],
    }
    provider = provider_config(name="ge", kind="gemini", allow_storage_uris=allow)
    return UpstreamCall(
        request=msgspec.convert(body, ChatRequest),
        body=body,
        provider=provider,
        key=None,
        model="gemini-x",
        stream=False,
        request_id="r1",
    )


@pytest.mark.parametrize("url", [GS, " gs://x/a.png", "S3://b/k.png", "file:///a.png", "b/k.png"])
def test_gemini_translation_refuses_storage_uris_itself(url: str) -> None:
    with pytest.raises(BadRequest) as caught:
        build_body(gemini_call(url, allow=False))
    assert caught.value.code == "unsupported_url_scheme"
    assert caught.value.param == "messages[0].content[0].image_url.url"


def test_gemini_translation_sends_storage_uris_where_the_provider_allows_them() -> None:
    sent = json.loads(build_body(gemini_call(GS, allow=True)))
    assert sent["contents"][0]["parts"] == [{"fileData": {"fileUri": GS, "mimeType": "image/png"}}]
    sent = json.loads(build_body(gemini_call("https://x.test/a.png", allow=False)))
    assert sent["contents"][0]["parts"][0]["fileData"]["fileUri"] == "https://x.test/a.png"
