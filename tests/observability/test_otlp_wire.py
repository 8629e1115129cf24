"""gateway/observability/otlp_wire.py writes the message the SDK's encoder builds: for spans
hypothesis makes up (every attribute value type, events, links, remote and local parents,
trace state, status, several resources and scopes), both are decoded with
opentelemetry-proto and compared field by field."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link
from opentelemetry.trace import SpanContext
from opentelemetry.trace import SpanKind
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode
from opentelemetry.trace import TraceFlags
from opentelemetry.trace import TraceState

from gateway.observability import otlp_wire

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
