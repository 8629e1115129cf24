"""Continuation after content (models[].recovery: continue; S08 cut mid-answer, S09 stall,
S14 a fallback that rejects the prefill): a stream that breaks after its client received part
of the answer goes on at a target that can continue it, and real clients (openai-python for
chat and responses, anthropic-python, langchain) assemble the complete answer, exactly once:
nothing doubled or dropped whether the break falls inside a word, inside a multi-byte
character or after a space (which Anthropic's prefill refuses).
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.continuing_upstream import ANSWER
from tests.upstreams.continuing_upstream import INPUT_TOKENS
from tests.upstreams.continuing_upstream import ContinuingUpstream
from tests.upstreams.continuing_upstream import anthropic_events
from tests.upstreams.continuing_upstream import openai_events
from tests.upstreams.continuing_upstream import pieces

pytestmark = pytest.mark.e2e

HOWS = ("reset", "stall", "truncated", "error", "badjson")


def _cut(api: str, how: str, point: str) -> int:
    """A byte of the answer's stream (its upstream model named `break-<how>-NNNN`): inside
    the 3-byte 東 (`char`), inside `fort` (`word`), or just past the piece that ends in
    `the ` (`space`: the prefill then ends in a space)."""
    model = f"break-{how}-0000"
    events = (anthropic_events if api == "anthropic" else openai_events)(
        ANSWER, model, INPUT_TOKENS
    )
    blob = b"".join(events)
    if point == "char":
        return blob.index("東".encode()) + 1
    if point == "word":
        return blob.index(b"fort") + 2
    end = 0
    for event in events:
        end += len(event)
        if b'"the "' in event or b'the "' in event:
            return end + 5
    raise AssertionError("no piece ends in 'the '")


def _model(api: str, how: str, point: str) -> str:
    return f"break-{how}-{_cut(api, how, point):04d}"


@pytest.fixture(scope="module")
def upstream() -> Iterator[ContinuingUpstream]:
    fake = ContinuingUpstream().start()
    yield fake
    fake.stop()


def _models() -> str:
    return "".join(
        f"""
  - name: a-{how}-{point}
    recovery: {{mode: continue}}
    targets:
      - {{provider: cut, model: {_model("anthropic", how, point)}, priority: 0}}
      - {{provider: anth, model: answer, priority: 1}}"""
        for how in HOWS
        for point in ("char", "word", "space")
    )


@pytest.fixture(scope="module")
def gw(upstream: ContinuingUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    anth, oai, key = upstream.anthropic_url, upstream.openai_url, UPSTREAM_KEY
    config = f"""
store: {{url: "memory://"}}
routing: {{circuit_failures: 1000, retries_per_target: 0}}
providers:
  - name: cut
    kind: anthropic
    base_url: "{anth}"
    keys: [{{key: "{key}"}}]
    timeouts: {{idle_s: 0.5}}
  - name: cut-openai
    kind: openai
    base_url: "{oai}"
    keys: [{{key: "{key}"}}]
    timeouts: {{idle_s: 0.5}}
  - {{name: anth, kind: anthropic, base_url: "{anth}", keys: [{{key: "{key}"}}]}}
  - name: vllm
    kind: openai
    base_url: "{oai}"
    keys: [{{key: "{key}"}}]
    continuation: continue_final_message
  - name: deepseek
    kind: openai
    base_url: "{oai}"
    keys: [{{key: "{key}"}}]
    continuation: prefix
  - {{name: plain, kind: openai, base_url: "{oai}", keys: [{{key: "{key}"}}]}}
models:{_models()}
  - name: to-vllm
    recovery: {{mode: continue}}
    targets:
      - {{provider: cut-openai, model: {_model("openai", "reset", "word")}, priority: 0}}
      - {{provider: vllm, model: answer, priority: 1}}
  - name: to-deepseek
    recovery: {{mode: continue}}
    targets:
      - {{provider: cut, model: {_model("anthropic", "truncated", "char")}, priority: 0}}
      - {{provider: deepseek, model: answer, priority: 1}}
  - name: s14
    recovery: {{mode: continue}}
    targets:
      - {{provider: cut, model: {_model("anthropic", "reset", "word")}, priority: 0}}
      - {{provider: plain, model: answer, priority: 1}}
      - {{provider: anth, model: reject-prefill, priority: 2}}
      - {{provider: vllm, model: answer, priority: 3}}
  - name: twice
    recovery: {{mode: continue, max_continuations: 2}}
    targets:
      - {{provider: cut, model: {_model("anthropic", "error", "space")}, priority: 0}}
      - {{provider: cut, model: {_model("anthropic", "reset", "char")}, priority: 1}}
      - {{provider: anth, model: answer, priority: 2}}
  - name: once-only
    recovery: {{mode: continue, max_continuations: 1}}
    targets:
      - {{provider: cut, model: {_model("anthropic", "error", "space")}, priority: 0}}
      - {{provider: cut, model: {_model("anthropic", "reset", "char")}, priority: 1}}
      - {{provider: anth, model: answer, priority: 2}}
  - name: fails-before-joining
    recovery: {{mode: continue, max_continuations: 1}}
    targets:
      - {{provider: cut, model: {_model("anthropic", "reset", "word")}, priority: 0}}
      - {{provider: anth, model: fail-500, priority: 1}}
      - {{provider: anth, model: reject-prefill, priority: 2}}
      - {{provider: anth, model: answer, priority: 3}}
  - name: nobody-continues
    recovery: {{mode: continue}}
    targets:
      - {{provider: cut, model: {_model("anthropic", "reset", "word")}, priority: 0}}
      - {{provider: plain, model: answer, priority: 1}}
  - name: recovery-off
    targets:
      - {{provider: cut, model: {_model("anthropic", "reset", "word")}, priority: 0}}
      - {{provider: anth, model: answer, priority: 1}}
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("continuation"))
    yield gateway
    stop_gateway(gateway)


def _chat(gw: Gateway, model: str) -> tuple[str, list[str | None], object]:
    with openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=30) as client:
        stream = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "tell the story"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text, finishes, usage, roles = [], [], None, 0
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.role:
                    roles += 1
                if choice.delta.content:
                    text.append(choice.delta.content)
                if choice.finish_reason:
                    finishes.append(choice.finish_reason)
    assert roles <= 1
    return "".join(text), finishes, usage


def _until_the_error(gw: Gateway, model: str) -> str:
    """The text a stream that ends with an error event gave openai-python before it."""
    parts: list[str] = []

    def read() -> None:
        with openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=30) as client:
            stream = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "x"}], stream=True
            )
            parts.extend(c.delta.content or "" for chunk in stream for c in chunk.choices)

    with pytest.raises(openai.APIError):
        read()
    return "".join(parts)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("point", ["char", "word", "space"])
def test_openai_python_gets_the_whole_answer_once(
    gw: Gateway, upstream: ContinuingUpstream, how: str, point: str
) -> None:
    before = len(upstream.seen)
    text, finishes, usage = _chat(gw, f"a-{how}-{point}")
    assert text == ANSWER
    assert finishes == ["stop"]
    prefill = upstream.prefills()[before + 1]
    assert prefill
    assert ANSWER.startswith(prefill)
    assert prefill == prefill.rstrip()
    # the usage chunk is every attempt's: the broken one's (its count never came: the
    # prompt's estimate, and the output it streamed) and the continuation's own count
    rest = pieces(ANSWER[len(prefill) :])
    assert usage is not None
    assert usage.prompt_tokens > INPUT_TOKENS + len(prefill) // 4 + INPUT_TOKENS // 2
    assert usage.completion_tokens >= len(rest) + len(prefill) // 4


def test_the_stream_says_it_was_recovered_and_keeps_one_identity(gw: Gateway) -> None:
    body = {
        "model": "a-reset-word",
        "messages": [{"role": "user", "content": "tell the story"}],
        "stream": True,
    }
    with httpx.stream("POST", gw.v1 + "/chat/completions", json=body, timeout=30) as answer:
        raw = b"".join(answer.iter_bytes()).decode()
    assert re.search(r"^: gateway-recovered attempts=2 provider=anth$", raw, re.M), raw
    ids = set(re.findall(r'"id":"([^"]+)"', raw))
    assert len(ids) == 1, ids  # the continuation's chunks carry the stream's own id
    assert raw.count('"role":"assistant"') == 1
    assert raw.count('"finish_reason":"stop"') == 1
    assert raw.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize("model", ["to-vllm", "to-deepseek"])
def test_openai_compatible_servers_continue_by_their_declared_flag(
    gw: Gateway, upstream: ContinuingUpstream, model: str
) -> None:
    before = len(upstream.seen)
    text, finishes, _ = _chat(gw, model)
    assert text == ANSWER
    assert finishes == ["stop"]
    _, body = upstream.seen[before + 1]
    last = body["messages"][-1]
    assert last["role"] == "assistant"
    if model == "to-vllm":
        assert body["continue_final_message"] is True
        assert body["add_generation_prompt"] is False
        assert "prefix" not in last
    else:
        assert last["prefix"] is True
        assert "continue_final_message" not in body


def test_a_target_that_rejects_the_prefill_is_skipped_for_the_next(
    gw: Gateway, upstream: ContinuingUpstream
) -> None:
    before = len(upstream.seen)
    text, finishes, _ = _chat(gw, "s14")
    assert text == ANSWER
    assert finishes == ["stop"]
    tried = [model for model, _ in upstream.seen[before:]]
    # `plain` (OpenAI's own API) cannot continue an answer: it was never sent one
    assert tried[1:] == ["reject-prefill", "answer"]
    assert upstream.seen[-1][1]["continue_final_message"] is True


def test_a_stream_is_continued_after_each_break_up_to_max_continuations(
    gw: Gateway, upstream: ContinuingUpstream
) -> None:
    before = len(upstream.seen)
    text, finishes, _ = _chat(gw, "twice")
    assert text == ANSWER
    assert finishes == ["stop"]
    prefills = upstream.prefills()[before:]
    assert prefills[0] is None
    assert prefills[1]
    assert prefills[2]
    assert len(prefills[2]) > len(prefills[1])

    had = _until_the_error(gw, "once-only")
    assert ANSWER.startswith(had)  # what it had, never doubled
    assert had != ANSWER


def test_a_continuation_that_fails_before_its_answer_is_one_more_attempt(
    gw: Gateway, upstream: ContinuingUpstream
) -> None:
    """A 500 and a refused prefill on the way are attempts of the one continuation
    (max_continuations: 1), not breaks of their own: the last target finishes the answer."""
    before = len(upstream.seen)
    text, finishes, _ = _chat(gw, "fails-before-joining")
    assert text == ANSWER
    assert finishes == ["stop"]
    assert [model for model, _ in upstream.seen[before + 1 :]] == [
        "fail-500",
        "reject-prefill",
        "answer",
    ]


@pytest.mark.parametrize("model", ["nobody-continues", "recovery-off"])
def test_without_a_target_to_continue_the_stream_ends_with_an_error_event(
    gw: Gateway, model: str
) -> None:
    text = _until_the_error(gw, model)
    assert text
    assert ANSWER.startswith(text)
    assert text != ANSWER


def test_anthropic_python_gets_the_whole_answer_once(gw: Gateway) -> None:
    client = anthropic.Anthropic(base_url=gw.url, api_key="any", max_retries=0, timeout=30)
    with client.messages.stream(
        model="a-stall-char",
        max_tokens=500,
        messages=[{"role": "user", "content": "tell the story"}],
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()
    assert "".join(b.text for b in message.content if b.type == "text") == ANSWER
    assert [b.type for b in message.content] == ["text"]
    assert message.stop_reason == "end_turn"
    assert sum(e.type == "message_start" for e in events) == 1
    assert sum(e.type == "message_stop" for e in events) == 1
    assert message.usage.output_tokens > 0


def test_openai_python_responses_stream_gets_the_whole_answer_once(gw: Gateway) -> None:
    with (
        openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=30) as client,
        client.responses.stream(model="a-badjson-word", input="tell the story") as stream,
    ):
        for _ in stream:
            pass
        response = stream.get_final_response()
    assert response.output_text == ANSWER
    assert response.status == "completed"
    assert len(response.output) == 1


def test_langchain_gets_the_whole_answer_once(gw: Gateway) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model="a-truncated-space", base_url=gw.v1, api_key="any", max_retries=0, timeout=30
    )
    text = "".join(str(part.content) for part in llm.stream("tell the story"))
    assert text == ANSWER


def test_recoveries_are_counted(gw: Gateway) -> None:
    _chat(gw, "a-error-word")
    with pytest.raises(openai.APIError):
        _chat(gw, "nobody-continues")
    with urllib.request.urlopen(gw.url + "/metrics", timeout=5) as answer:
        metrics = answer.read().decode()
    recovered = re.search(
        r'^gateway_recoveries_total\{model="a-error-word",provider="cut",result="recovered"\} '
        r"(\d+)",
        metrics,
        re.M,
    )
    assert recovered is not None
    assert int(recovered.group(1)) >= 1
    assert re.search(
        r'^gateway_recoveries_total\{model="nobody-continues",provider="cut",result="failed"\} ',
        metrics,
        re.M,
    )
