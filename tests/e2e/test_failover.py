"""Failover across provider kinds, seen by a real openai-python client, and what happens
when an upstream fails after the commit point (an error event, then `[DONE]`, never a retry).

Every case has its own model and its own failing provider (a key of its own), so that the
key health one case leaves behind (a cooldown, a circuit) cannot change another's plan.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.faulty_upstream import CALLS
from tests.upstreams.faulty_upstream import TEXT
from tests.upstreams.faulty_upstream import TEXT_PIECES
from tests.upstreams.faulty_upstream import TOOLS
from tests.upstreams.faulty_upstream import FaultyUpstream

pytestmark = pytest.mark.e2e

BEFORE_COMMIT = ["fail-500", "reset-before", "slow-first-byte", "rate-limit-7"]
# (provider kind, mode): failures once content has reached the client
AFTER_COMMIT = [
    ("openai", "reset-mid"),
    ("openai", "stall"),
    ("openai", "truncated"),
    ("openai", "bad-json"),
    ("anthropic", "reset-mid"),
    ("anthropic", "stall"),
    ("bedrock", "bad-crc"),
    ("bedrock", "truncated-frame"),
    ("bedrock", "exception"),
]
COMMITTED_TEXT = "".join(TEXT_PIECES[:2])  # what the faulty modes send before failing
ANTHROPIC_KEY = "sk-ant-answering"
# The failing providers give up fast: slow-first-byte sleeps 1.5 s, past both limits (a
# non-streaming upstream's first byte is its whole answer, bounded by total_s).
FAST = "{first_byte_s: 0.5, idle_s: 0.5, total_s: 1.0}"


def provider(name: str, kind: str, url: str, timeouts: str = FAST, key: str = "") -> str:
    keys = f"{{key: {key or 'sk-' + name}}}"
    if kind == "bedrock":  # SigV4 with dummy credentials; the access key id names the provider
        keys = f"{{aws_access_key_id: AKID-{name}, aws_secret_access_key: dummy-secret}}"
        kind += "\n    region: us-east-1"
    return f"""
  - name: {name}
    kind: {kind}
    base_url: {url}
    keys: [{keys}]
    timeouts: {timeouts}"""


def model(name: str, *targets: tuple[str, str]) -> str:
    listed = ", ".join(
        f"{{provider: {p}, model: {m}, priority: {i}}}" for i, (p, m) in enumerate(targets)
    )
    return f"\n  - name: {name}\n    targets: [{listed}]"


def flavour(stream: bool) -> str:
    return "s" if stream else "u"


def config(up: FaultyUpstream) -> str:
    calm = "{first_byte_s: 5, idle_s: 5, total_s: 10}"
    providers = [
        provider("an", "anthropic", up.anthropic_url, calm, key=ANTHROPIC_KEY),
        provider("oa_ok", "openai", up.openai_url, calm),
    ]
    models = []
    for stream in (True, False):
        f = flavour(stream)
        for mode in [*BEFORE_COMMIT, "fail-400"]:
            name = f"oa_{mode}_{f}"
            providers.append(provider(name, "openai", up.openai_url))
            models.append(model(f"x-{mode}-{f}", (name, mode), ("an", "ok")))
        providers.append(provider(f"an_over_{f}", "anthropic", up.anthropic_url))
        models.append(model(f"x-overloaded-{f}", (f"an_over_{f}", "overloaded"), ("oa_ok", "ok")))
    providers.append(provider("br_crc_first", "bedrock", up.bedrock_url))
    models.append(model("x-bad-crc-first", ("br_crc_first", "bad-crc-first"), ("an", "ok")))
    urls = {"openai": up.openai_url, "anthropic": up.anthropic_url, "bedrock": up.bedrock_url}
    for kind, mode in AFTER_COMMIT:
        for client in ("raw", "sdk"):
            name = f"{kind}_{mode}_{client}"
            url = urls[kind]
            providers.append(provider(name, kind, url))
            models.append(model(f"y-{name}", (name, mode), ("oa_ok", "ok")))
    return (
        "server: {shutdown_grace_s: 5}\nstore: {url: 'memory://'}\nproviders:"
        + "".join(providers)
        + "\nmodels:"
        + "".join(models)
        + "\n"
    )


@pytest.fixture(scope="module")
def up() -> Iterator[FaultyUpstream]:
    upstream = FaultyUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gw(up: FaultyUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start_gateway(config(up), tmp_path_factory.mktemp("gw-failover"))
    yield gateway
    stop_gateway(gateway)


@pytest.fixture
def client(gw: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.v1, api_key="k", max_retries=0, timeout=20) as c:
        yield c


def tagged() -> tuple[str, list[Any]]:
    """A tag the upstream records, so a test can count the attempts it really made."""
    tag = uuid.uuid4().hex[:12]
    return tag, [{"role": "user", "content": f"What is the answer? tag:{tag}"}]


def answer_of(chunks: list[Any]) -> tuple[str, list[tuple[str, Any]], list[str]]:
    """Text, tool calls (name, parsed arguments) by index, and every finish_reason."""
    text, finishes = "", []
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            assert choice.index == 0
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"name": "", "arguments": ""})
                slot["name"] += call.function.name or ""
                slot["arguments"] += call.function.arguments or ""
            if choice.finish_reason is not None:
                finishes.append(choice.finish_reason)
    parsed = [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
    return text, parsed, finishes


def assert_healthy_answer(raw: Any, stream: bool) -> None:
    if stream:
        text, calls, finishes = answer_of(list(raw.parse()))
        assert finishes == ["tool_calls"]
    else:
        message = raw.parse().choices[0].message
        text = message.content
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]
        assert raw.parse().choices[0].finish_reason == "tool_calls"
    assert text == TEXT
    assert calls == CALLS


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
@pytest.mark.parametrize("mode", BEFORE_COMMIT)
def test_openai_failure_fails_over_to_anthropic(
    client: openai.OpenAI, up: FaultyUpstream, mode: str, stream: bool
) -> None:
    tag, messages = tagged()
    raw = client.chat.completions.with_raw_response.create(
        model=f"x-{mode}-{flavour(stream)}", messages=messages, tools=TOOLS, stream=stream
    )
    # a 5xx or a reset is tried once more on its target (routing.retries_per_target, default
    # 1); a timeout or a 429 with a long Retry-After moves on at once
    attempts = 3 if mode in ("fail-500", "reset-before") else 2
    assert raw.headers["x-gateway-attempts"] == str(attempts)
    assert raw.headers["x-gateway-provider"] == "an"
    assert raw.headers["x-gateway-model"] == "ok"
    assert_healthy_answer(raw, stream)
    seen = up.seen(tag)
    assert len(seen) == attempts  # every request the upstream saw is an attempt, no resends
    assert {(s.api, s.mode) for s in seen[:-1]} == {("openai", mode)}
    last = seen[-1]
    assert (last.api, last.mode, last.key, last.stream) == (
        "anthropic",
        "ok",
        ANTHROPIC_KEY,
        stream,
    )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_anthropic_overloaded_fails_over(
    client: openai.OpenAI, up: FaultyUpstream, stream: bool
) -> None:
    """The overloaded_error event comes inside a 200 stream, right after message_start:
    nothing reached the client yet, so another target may still answer."""
    tag, messages = tagged()
    raw = client.chat.completions.with_raw_response.create(
        model=f"x-overloaded-{flavour(stream)}", messages=messages, tools=TOOLS, stream=stream
    )
    # an overload is tried once more on its target (routing.retries_per_target), then failover
    assert raw.headers["x-gateway-attempts"] == "3"
    assert raw.headers["x-gateway-provider"] == "oa_ok"
    assert_healthy_answer(raw, stream)
    assert [(s.api, s.mode) for s in up.seen(tag)] == [
        ("anthropic", "overloaded"),
        ("anthropic", "overloaded"),
        ("openai", "ok"),
    ]


def test_bedrock_bad_crc_before_commit_fails_over(
    client: openai.OpenAI, up: FaultyUpstream
) -> None:
    """The first content frame of the ConverseStream body fails its message CRC: nothing
    reached the client yet, so the Anthropic target answers in its place."""
    tag, messages = tagged()
    raw = client.chat.completions.with_raw_response.create(
        model="x-bad-crc-first", messages=messages, tools=TOOLS, stream=True
    )
    assert raw.headers["x-gateway-attempts"] == "2"
    assert raw.headers["x-gateway-provider"] == "an"
    assert_healthy_answer(raw, True)
    seen = [(s.api, s.mode, s.key, s.tools) for s in up.seen(tag)]
    assert seen == [
        ("bedrock", "bad-crc-first", "AKID-br_crc_first", True),
        ("anthropic", "ok", ANTHROPIC_KEY, True),
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_bad_request_is_not_retried(
    gw: Gateway, client: openai.OpenAI, up: FaultyUpstream, stream: bool
) -> None:
    tag, messages = tagged()
    name = f"x-fail-400-{flavour(stream)}"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=name, messages=messages, tools=TOOLS, stream=stream)
    response = caught.value.response
    assert response.status_code == 400
    assert response.headers["x-gateway-attempts"] == "1"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "faulty upstream refused the request with 400" in error["message"]
    assert error["type"] == "invalid_request_error"
    assert [(s.api, s.mode) for s in up.seen(tag)] == [("openai", "fail-400")]


def sse_events(body: bytes) -> list[bytes]:
    """The `data:` payloads of an SSE body; comments (keep-alives) are skipped."""
    out = []
    for frame in body.split(b"\n\n"):
        lines = [ln for ln in frame.split(b"\n") if ln and not ln.startswith(b":")]
        if lines:
            assert all(ln.startswith(b"data: ") for ln in lines), frame
            out.append(b"\n".join(ln.removeprefix(b"data: ") for ln in lines))
    return out


@pytest.mark.parametrize(("kind", "mode"), AFTER_COMMIT)
def test_failure_after_commit_is_an_error_event(
    gw: Gateway, up: FaultyUpstream, kind: str, mode: str
) -> None:
    tag, messages = tagged()
    body = {"model": f"y-{kind}_{mode}_raw", "messages": messages, "stream": True}
    with httpx.Client(timeout=httpx.Timeout(20.0)) as http:
        response = http.post(gw.v1 + "/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["x-gateway-attempts"] == "1"
    events = sse_events(response.content)
    assert events[-1] == b"[DONE]"
    error = json.loads(events[-2])["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    chunks = [json.loads(e) for e in events[:-2]]
    assert all("error" not in c for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == COMMITTED_TEXT  # all that was sent, once: no silent retry
    assert not [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [(s.api, s.mode) for s in up.seen(tag)] == [(kind, mode)]


@pytest.mark.parametrize(("kind", "mode"), AFTER_COMMIT)
def test_openai_python_raises_after_commit(
    client: openai.OpenAI, up: FaultyUpstream, kind: str, mode: str
) -> None:
    tag, messages = tagged()
    stream = client.chat.completions.create(
        model=f"y-{kind}_{mode}_sdk", messages=messages, tools=TOOLS, stream=True
    )
    chunks: list[Any] = []
    with stream, pytest.raises(openai.APIError):
        chunks.extend(stream)
    text, calls, finishes = answer_of(chunks)
    assert (calls, finishes) == ([], [])
    assert text == COMMITTED_TEXT
    assert [(s.api, s.mode) for s in up.seen(tag)] == [(kind, mode)]
