"""gateway/observability/otlp_wire.py writes the message the SDK's encoder builds: for spans
hypothesis makes up (every attribute value type, events, links, remote and local parents,
trace state, status, several resources and scopes), both are decoded with
opentelemetry-proto and compared field by field."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link
from opentelemetry.trace import SpanContext
from opentelemetry.trace import SpanKind
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode
from opentelemetry.trace import TraceFlags
from opentelemetry.trace import TraceState

from gateway.config_observe import TracingConfig
from gateway.observability import otlp_wire
from gateway.observability.request_trace import WiredSpan
from gateway.observability.tracing import Tracing
from tests.observability.test_tracing import FakeAttempt

RESOURCES = [
    Resource.create({"service.name": "gateway"}),
    Resource({"service.name": "other", "n": 3}, schema_url="https://opentelemetry.io/schemas/1"),
]
SCOPES = [
    InstrumentationScope("gateway"),
    InstrumentationScope("lib", "1.2.3", "https://example.com/s", {"a": "b"}),
    None,
]

text = st.text(max_size=40)
scalar = st.one_of(
    text,
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
)
value = st.one_of(
    scalar,
    st.lists(text, max_size=3).map(tuple),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=3).map(tuple),
    st.lists(st.booleans(), max_size=3).map(tuple),
)
attributes = st.dictionaries(st.text(min_size=1, max_size=20), value, max_size=6)
trace_ids = st.integers(min_value=1, max_value=2**128 - 1)
span_ids = st.integers(min_value=1, max_value=2**64 - 1)
states = st.one_of(
    st.none(),
    st.just(TraceState([("vendor", "v1"), ("other", "x-y")])),
)


@st.composite
def contexts(draw: Any) -> SpanContext:
    return SpanContext(
        draw(trace_ids),
        draw(span_ids),
        is_remote=draw(st.booleans()),
        trace_flags=TraceFlags(draw(st.sampled_from([0, 1]))),
        trace_state=draw(states),
    )


@st.composite
def spans(draw: Any) -> ReadableSpan:
    start = draw(st.integers(min_value=0, max_value=2**63))
    events = [
        Event(draw(text), draw(attributes), timestamp=draw(st.integers(0, 2**63)))
        for _ in range(draw(st.integers(0, 2)))
    ]
    links = [Link(draw(contexts()), draw(attributes)) for _ in range(draw(st.integers(0, 2)))]
    code = draw(st.sampled_from(list(StatusCode)))
    description = draw(st.one_of(st.none(), text)) if code is StatusCode.ERROR else None
    return ReadableSpan(
        name=draw(text),
        context=draw(contexts()),
        parent=draw(st.one_of(st.none(), contexts())),
        resource=draw(st.sampled_from(RESOURCES)),
        attributes=draw(attributes),
        events=events,
        links=links,
        kind=draw(st.sampled_from(list(SpanKind))),
        status=Status(code, description),
        start_time=start,
        end_time=start + draw(st.integers(0, 10**12)),
        instrumentation_scope=draw(st.sampled_from(SCOPES)),
    )


def decoded(body: bytes) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(body)


@settings(max_examples=300, deadline=None)
@given(st.lists(spans(), min_size=1, max_size=6))
def test_the_bytes_decode_to_the_message_the_sdk_builds(batch: list[ReadableSpan]) -> None:
    ours = decoded(otlp_wire.export_request(batch))
    theirs = decoded(encode_spans(batch).SerializePartialToString())
    assert ours == theirs


def test_a_repeated_key_value_is_encoded_once_and_the_cache_is_bounded() -> None:
    otlp_wire._KEY_VALUES.clear()
    first = otlp_wire.key_value("http.request.method", "POST")
    assert otlp_wire.key_value("http.request.method", "POST") is first
    assert otlp_wire.key_value("n", 7) == b"\x0a\x01n\x12\x02\x18\x07"  # ints are not kept
    assert ("n", 7) not in otlp_wire._KEY_VALUES
    for i in range(otlp_wire._KEY_VALUES_MAX + 10):
        otlp_wire.key_value("id", f"v{i}")
    assert len(otlp_wire._KEY_VALUES) <= otlp_wire._KEY_VALUES_MAX


def test_a_bool_and_an_int_of_the_same_value_are_not_confused() -> None:
    assert otlp_wire.key_value("flag", True) != otlp_wire.key_value("flag", 1)
    assert otlp_wire.key_value("flag", 1) == b"\x0a\x04flag\x12\x02\x18\x01"


class Keeping(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += spans
        return SpanExportResult.SUCCESS


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01", "tracestate": "vendor=v1,other=x"},
    ],
)
async def test_the_spans_a_request_makes_carry_the_encoding_of_their_values(
    headers: dict[str, str],
) -> None:
    """The gateway's spans come encoded as they end (WiredSpan.wire): that encoding is the
    message the SDK's encoder makes of the same ReadableSpan, content events and errors
    included."""
    from tests.observability.test_tracing import one_failover
    from tests.observability.test_tracing import providers

    keeping = Keeping()
    config = TracingConfig(otlp_endpoint="http://127.0.0.1:9", content=True)
    tracing = Tracing.from_config(config, {}, exporter=keeping)
    trace = tracing.start_request(headers, "/v1/chat/completions", "POST")
    trace.prompt("the prompt, with an é")
    trace.completion("an answer")
    one_failover(trace)
    failing = tracing.start_request({}, "/v1/embeddings", "POST")
    failing.attempt_started(FakeAttempt(providers()["up"], "emb"))  # type: ignore[arg-type]
    failing.finish(
        status=502,
        model=None,
        provider=None,
        response_model=None,
        input_tokens=None,
        output_tokens=None,
        finish_reason=None,
        error="upstream_unreachable",
        operation="embeddings",
    )
    assert await tracing.shutdown(5.0)
    assert len(keeping.spans) == 5
    assert all(isinstance(s, WiredSpan) for s in keeping.spans)
    ours = decoded(otlp_wire.export_request(keeping.spans))
    theirs = decoded(encode_spans(keeping.spans).SerializePartialToString())
    assert ours == theirs
    assert [s.name for r in ours.resource_spans for ss in r.scope_spans for s in ss.spans] == [
        "chat gpt-x",
        "chat claude-y",
        "chat smart",
        "embeddings emb",
        "POST /v1/embeddings",
    ]


def test_tuples_of_bools_and_ints_that_compare_equal_stay_apart() -> None:
    fields = [
        otlp_wire.attributes(b"\x4a", {"t": value}) for value in [(True,), (1,), (1.0,), ("1",)]
    ]
    assert len(set(fields)) == 4
    again = [otlp_wire.attributes(b"\x4a", {"t": value}) for value in [(1,), (True,)]]
    assert again == [fields[1], fields[0]]


def test_one_attribute_encoders_write_what_attribute_fields_writes() -> None:
    for key, number in [("http.response.status_code", 200), ("n", 0), ("n", -3), ("n", 2**40)]:
        assert otlp_wire.int_attribute(key, number) == otlp_wire.attribute_fields({key: number})
    texts: list[tuple[str, str | tuple[str, ...]]] = [
        ("error.type", "upstream_unreachable"),
        ("error.type", "é" * 200),
        ("gen_ai.response.finish_reasons", ("stop",)),
        ("gen_ai.response.finish_reasons", ("tool_calls", "stop")),
    ]
    for key, text in texts:
        assert otlp_wire.text_attribute(key, text) == otlp_wire.attribute_fields({key: text})
        assert otlp_wire.text_attribute(key, text) == otlp_wire.text_attribute(key, text)
