"""A client's traceparent as the gateway reads it (W3C Trace Context; the rules the SDK's
propagator applies): what continues a trace and what starts a new one."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.observability.request_trace import parse_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def sdk(header: str, state: str | None) -> trace.SpanContext | None:
    carrier = {"traceparent": header}
    if state is not None:
        carrier["tracestate"] = state
    ctx = trace.get_current_span(TraceContextTextMapPropagator().extract(carrier))
    span = ctx.get_span_context()
    return span if span.is_valid else None


@pytest.mark.parametrize(
    ("header", "valid"),
    [
        (f"00-{TRACE}-{SPAN}-01", True),
        (f"00-{TRACE}-{SPAN}-00", True),
        (f"  00-{TRACE}-{SPAN}-03 ", True),
        (f"01-{TRACE}-{SPAN}-01-future-part", True),  # a later version may add fields
        (f"00-{TRACE}-{SPAN}-01-extra", False),  # version 00 may not
        (f"ff-{TRACE}-{SPAN}-01", False),
        (f"00-{'0' * 32}-{SPAN}-01", False),
        (f"00-{TRACE}-{'0' * 16}-01", False),
        (f"00-{TRACE.upper()}-{SPAN}-01", False),
        (f"00-{TRACE[:-1]}-{SPAN}-01", False),
        ("garbage", False),
        ("", False),
        (f"01-{TRACE}-{SPAN}-01-" + "x" * 600, False),  # longer than 512
    ],
)
def test_a_traceparent_is_read_as_the_sdk_reads_it(header: str, valid: bool) -> None:
    ours = parse_traceparent(header, None)
    assert (ours is not None) is valid
    theirs = sdk(header, None)
    assert (theirs is not None) is valid
    if ours is not None and theirs is not None:
        assert (ours.trace_id, ours.span_id, ours.trace_flags, ours.is_remote) == (
            theirs.trace_id,
            theirs.span_id,
            theirs.trace_flags,
            theirs.is_remote,
        )


@pytest.mark.parametrize("state", ["vendor=v1,other=x-y", "not a valid state", "a=" + "b" * 600])
def test_tracestate_rides_with_a_valid_traceparent_only_when_it_is_valid(state: str) -> None:
    ours = parse_traceparent(f"00-{TRACE}-{SPAN}-01", state)
    theirs = sdk(f"00-{TRACE}-{SPAN}-01", state)
    assert ours is not None
    assert theirs is not None
    assert dict(ours.trace_state) == dict(theirs.trace_state)
