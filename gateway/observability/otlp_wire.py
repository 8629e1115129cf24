"""The OTLP/HTTP protobuf body of a batch of finished spans (an ExportTraceServiceRequest,
opentelemetry/proto/collector/trace/v1), written as bytes directly.

The SDK's encoder builds a protobuf message object per span, attribute and value, then
serialises them: ~48 µs a span, on the same core and under the same GIL as the event
loop. Here the wire format is written directly, and what
repeats from span to span (a key with its string value: `http.request.method=POST`, a
model's name, the resource, the scope) is encoded once and its bytes reused. The result is
the message the SDK's `encode_spans` gives (tests/observability/test_otlp_wire.py decodes
both with opentelemetry-proto and compares them, for spans hypothesis makes up).

Sans-IO: spans in (anything shaped like the SDK's ReadableSpan), bytes out.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

# field tags: (field number << 3) | wire type (0 varint, 1 fixed64, 2 bytes, 5 fixed32)
_ANY_STRING, _ANY_BOOL, _ANY_INT, _ANY_DOUBLE = b"\x0a", b"\x10", b"\x18", b"\x21"
_ANY_ARRAY, _ANY_KVLIST, _ANY_BYTES = b"\x2a", b"\x32", b"\x3a"
_SPAN_TRACE_ID = b"\x0a\x10"  # with its fixed length: 16 bytes
_SPAN_SPAN_ID = b"\x12\x08"
_SPAN_TRACE_STATE = b"\x1a"
_SPAN_PARENT_ID = b"\x22\x08"
_SPAN_NAME = b"\x2a"
_SPAN_KIND = b"\x30"
_SPAN_START, _SPAN_END = b"\x39", b"\x41"
_SPAN_ATTRIBUTE, _SPAN_DROPPED_ATTRIBUTES = b"\x4a", b"\x50"
_SPAN_EVENT, _SPAN_DROPPED_EVENTS = b"\x5a", b"\x60"
_SPAN_LINK, _SPAN_DROPPED_LINKS = b"\x6a", b"\x70"
_SPAN_STATUS = b"\x7a"
_SPAN_FLAGS = b"\x85\x01"  # field 16, fixed32
_EVENT_TIME, _EVENT_NAME, _EVENT_ATTRIBUTE, _EVENT_DROPPED = b"\x09", b"\x12", b"\x1a", b"\x20"
_LINK_TRACE_ID, _LINK_SPAN_ID, _LINK_TRACE_STATE = b"\x0a\x10", b"\x12\x08", b"\x1a"
_LINK_ATTRIBUTE, _LINK_DROPPED, _LINK_FLAGS = b"\x22", b"\x28", b"\x35"
_STATUS_MESSAGE, _STATUS_CODE = b"\x12", b"\x18"
# SpanFlags: the span says whether its parent is remote (HAS_IS_REMOTE), and whether it is
_FLAGS_LOCAL_PARENT = struct.pack("<I", 0x100)
_FLAGS_REMOTE_PARENT = struct.pack("<I", 0x300)

_fixed64 = struct.Struct("<Q").pack
_double = struct.Struct("<d").pack

# (key, value) -> its KeyValue's bytes, for string and bool values: they repeat
_KEY_VALUES: dict[tuple[str, Any], bytes] = {}
_KEY_VALUES_MAX = 8192  # a bound against values that never repeat (ids, free text)


def varint(n: int) -> bytes:
    if 0 <= n < _SMALL:
        return _VARINTS[n]
    if n < 0:  # int64 in two's complement: ten bytes
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _slow_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# lengths, counts, ports and status codes: the varints written most, made once
_SMALL = 1 << 14
_VARINTS = [_slow_varint(n) for n in range(_SMALL)]


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag + varint(len(payload)) + payload


def any_value(value: Any) -> bytes:
    """An AnyValue's bytes (None: an empty AnyValue, as the SDK writes it)."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return _ANY_BOOL + (b"\x01" if value else b"\x00")
    if isinstance(value, str):
        return _field(_ANY_STRING, value.encode("utf-8", "surrogatepass"))
    if isinstance(value, int):
        return _ANY_INT + varint(value)
    if isinstance(value, float):
        return _ANY_DOUBLE + _double(value)
    if isinstance(value, bytes):
        return _field(_ANY_BYTES, value)
    if isinstance(value, Sequence):
        return _field(_ANY_ARRAY, b"".join([_field(b"\x0a", any_value(v)) for v in value]))
    if isinstance(value, Mapping):
        return _field(
            _ANY_KVLIST, b"".join([_field(b"\x0a", key_value(str(k), v)) for k, v in value.items()])
        )
    raise TypeError(f"an attribute value of type {type(value).__name__}")


def key_value(key: str, value: Any) -> bytes:
    """A KeyValue's bytes (without its own tag and length)."""
    cacheable = isinstance(value, str | bool)
    if cacheable:
        cached = _KEY_VALUES.get((key, value))
        if cached is not None:
            return cached
    encoded = _field(b"\x0a", key.encode("utf-8", "surrogatepass")) + _field(
        b"\x12", any_value(value)
    )
    if cacheable:
        if len(_KEY_VALUES) >= _KEY_VALUES_MAX:
            _KEY_VALUES.clear()
        _KEY_VALUES[(key, value)] = encoded
    return encoded


def _all_text(values: tuple[Any, ...]) -> bool:
    """A tuple of strings (finish_reasons) may be kept: (True,) == (1,) as a dict key, and
    a bool's tuple must never be taken for an int's."""
    return all(type(v) is str for v in values)


def attributes(tag: bytes, values: Mapping[str, Any] | None) -> bytes:
    """Each of `values` as a repeated KeyValue field `tag`."""
    if not values:
        return b""
    fields = _FIELDS.get(tag)
    if fields is None:
        fields = _FIELDS[tag] = {}
    parts = []
    for item in values.items():
        key, value = item
        kind = type(value)
        if kind is str or kind is bool or (kind is tuple and _all_text(value)):
            field = _kept_field(fields, tag, item)
        elif kind is int:  # token counts vary: the key's bytes are kept, not the pair's
            field = _int_field(tag, key, value)
        else:
            field = _field(tag, key_value(key, value))
        parts.append(field)
    return b"".join(parts)


def _kept_field(fields: dict[tuple[str, Any], bytes], tag: bytes, item: tuple[str, Any]) -> bytes:
    """The field of a (key, value) that repeats (str, bool, tuple of str), made once."""
    field = fields.get(item)
    if field is None:
        if len(fields) >= _KEY_VALUES_MAX:
            fields.clear()
        field = fields[item] = _field(tag, key_value(*item))
    return field


def _int_field(tag: bytes, key: str, value: int) -> bytes:
    name = _KEY_NAMES.get(key)
    if name is None:
        if len(_KEY_NAMES) >= _KEY_VALUES_MAX:
            _KEY_NAMES.clear()
        name = _KEY_NAMES[key] = _field(b"\x0a", key.encode("utf-8", "surrogatepass"))
    number = varint(value)
    body = name + b"\x12" + _VARINTS[len(number) + 1] + _ANY_INT + number
    return tag + varint(len(body)) + body


# a repeated field's tag -> (key, str, bool or tuple value) -> the whole field's bytes
_FIELDS: dict[bytes, dict[tuple[str, Any], bytes]] = {}
_KEY_NAMES: dict[str, bytes] = {}  # an attribute's key -> its KeyValue.key field


def _trace_state(state: Any) -> bytes:
    return ",".join([f"{k}={v}" for k, v in state.items()]).encode() if state else b""


def span(s: Any) -> bytes:
    """One Span's bytes (without its own tag and length)."""
    context, parent = s.context, s.parent
    parts = [
        _SPAN_TRACE_ID,
        context.trace_id.to_bytes(16, "big"),
        _SPAN_SPAN_ID,
        context.span_id.to_bytes(8, "big"),
    ]
    state = _trace_state(context.trace_state)
    if state:
        parts.append(_field(_SPAN_TRACE_STATE, state))
    if parent is not None:
        parts += (_SPAN_PARENT_ID, parent.span_id.to_bytes(8, "big"))
    parts += (
        _field(_SPAN_NAME, s.name.encode("utf-8", "surrogatepass")),
        _SPAN_KIND,
        varint(s.kind.value + 1),  # the SDK's SpanKind counts from INTERNAL = 0, OTLP from 1
        _SPAN_START,
        _fixed64(s.start_time or 0),
        _SPAN_END,
        _fixed64(s.end_time or 0),
        attributes(_SPAN_ATTRIBUTE, s.attributes),
    )
    if s.dropped_attributes:
        parts += (_SPAN_DROPPED_ATTRIBUTES, varint(s.dropped_attributes))
    for event in s.events:
        body = _EVENT_TIME + _fixed64(event.timestamp or 0)
        body += _field(_EVENT_NAME, event.name.encode("utf-8", "surrogatepass"))
        body += attributes(_EVENT_ATTRIBUTE, event.attributes)
        if event.dropped_attributes:
            body += _EVENT_DROPPED + varint(event.dropped_attributes)
        parts.append(_field(_SPAN_EVENT, body))
    if s.dropped_events:
        parts += (_SPAN_DROPPED_EVENTS, varint(s.dropped_events))
    for link in s.links:
        linked = link.context
        body = _LINK_TRACE_ID + linked.trace_id.to_bytes(16, "big")
        body += _LINK_SPAN_ID + linked.span_id.to_bytes(8, "big")
        body += attributes(_LINK_ATTRIBUTE, link.attributes)
        if link.dropped_attributes:
            body += _LINK_DROPPED + varint(link.dropped_attributes)
        body += _LINK_FLAGS + (_FLAGS_REMOTE_PARENT if linked.is_remote else _FLAGS_LOCAL_PARENT)
        parts.append(_field(_SPAN_LINK, body))
    if s.dropped_links:
        parts += (_SPAN_DROPPED_LINKS, varint(s.dropped_links))
    status = s.status
    body = b""
    if status.description:
        body = _field(_STATUS_MESSAGE, status.description.encode("utf-8", "surrogatepass"))
    if status.status_code.value:
        body += _STATUS_CODE + varint(status.status_code.value)
    parts += (_field(_SPAN_STATUS, body), _SPAN_FLAGS)
    parts.append(
        _FLAGS_REMOTE_PARENT if parent is not None and parent.is_remote else _FLAGS_LOCAL_PARENT
    )
    return b"".join(parts)


_TIMES = struct.Struct("<BQBQ").pack  # start_time_unix_nano, end_time_unix_nano
STATUS_UNSET = _field(_SPAN_STATUS, b"")
STATUS_ERROR = _field(_SPAN_STATUS, _STATUS_CODE + b"\x02")
_NAMES: dict[str, bytes] = {}  # a span's name -> its field: "chat gpt-4o" repeats


def span_field(
    trace_id: bytes,
    span_id: int,
    state: bytes,
    parent_id: int | None,
    parent_remote: bool,
    name: str,
    kind: int,
    start: int,
    end: int,
    encoded_attributes: bytes,
    events: Sequence[Any],
    status: bytes,
) -> bytes:
    """A ScopeSpans.spans field (tag, length, Span) from a span's values, for the gateway's
    own spans (no links, nothing dropped): what `span` writes for a ReadableSpan, without
    reading one. `trace_id`: its 16 bytes; `state`: a trace_state field or b""; `kind`:
    OTLP's SpanKind; `encoded_attributes`: attribute_fields of its attributes, in parts
    (the fields of a repeated field are simply written one after the other); `status`:
    STATUS_UNSET or STATUS_ERROR."""
    name_field = _NAMES.get(name)
    if name_field is None:
        if len(_NAMES) >= _KEY_VALUES_MAX:
            _NAMES.clear()
        name_field = _NAMES[name] = _field(_SPAN_NAME, name.encode("utf-8", "surrogatepass"))
    parts = [_SPAN_TRACE_ID, trace_id, _SPAN_SPAN_ID, span_id.to_bytes(8, "big"), state]
    if parent_id is not None:
        parts += (_SPAN_PARENT_ID, parent_id.to_bytes(8, "big"))
    parts += (
        name_field,
        _SPAN_KIND,
        _VARINTS[kind],
        _TIMES(0x39, start, 0x41, end),
        encoded_attributes,
    )
    for event in events:
        body = _EVENT_TIME + _fixed64(event.timestamp or 0)
        body += _field(_EVENT_NAME, event.name.encode("utf-8", "surrogatepass"))
        body += attributes(_EVENT_ATTRIBUTE, event.attributes)
        parts.append(_field(_SPAN_EVENT, body))
    parts += (status, _SPAN_FLAGS, _FLAGS_REMOTE_PARENT if parent_remote else _FLAGS_LOCAL_PARENT)
    return _field(b"\x12", b"".join(parts))


def attribute_fields(values: Mapping[str, Any]) -> bytes:
    """A span's attributes as its repeated `attributes` fields."""
    return attributes(_SPAN_ATTRIBUTE, values)


def int_attribute(key: str, value: int) -> bytes:
    """One span attribute of an int value (a status, a token count): the bytes
    attribute_fields({key: value}) writes, with no mapping to walk (each request's span
    has a few of these; they were a tenth of the span's cost)."""
    return _int_field(_SPAN_ATTRIBUTE, key, value)


def text_attribute(key: str, value: str | tuple[str, ...]) -> bytes:
    """One span attribute of a string (or a tuple of strings) value, kept once made: the
    bytes attribute_fields({key: value}) writes."""
    fields = _FIELDS.get(_SPAN_ATTRIBUTE)
    if fields is None:
        fields = _FIELDS[_SPAN_ATTRIBUTE] = {}
    return _kept_field(fields, _SPAN_ATTRIBUTE, (key, value))


def trace_state_field(state: Any) -> bytes:
    """A Span.trace_state field for a TraceState (b"" for an empty one)."""
    encoded = _trace_state(state)
    return _field(_SPAN_TRACE_STATE, encoded) if encoded else b""


# a resource's and a scope's encoding, by identity: a process has one of each
_HEADS: dict[tuple[int, int], tuple[Any, Any, bytes, bytes]] = {}


def _heads(resource: Any, scope: Any) -> tuple[bytes, bytes]:
    """The bytes of a ResourceSpans' resource and schema_url, and of a ScopeSpans' scope
    (the parts that are not its spans)."""
    known = _HEADS.get((id(resource), id(scope)))
    if known is not None and known[0] is resource and known[1] is scope:
        return known[2], known[3]
    resource_part = _field(b"\x0a", attributes(b"\x0a", resource.attributes))
    if resource.schema_url:
        resource_part += _field(b"\x1a", resource.schema_url.encode())
    scope_body = b""
    if scope is not None:
        if scope.name:
            scope_body += _field(b"\x0a", scope.name.encode())
        if scope.version:
            scope_body += _field(b"\x12", scope.version.encode())
        scope_body += attributes(b"\x1a", scope.attributes)
    scope_part = _field(b"\x0a", scope_body)
    if scope is not None and scope.schema_url:
        scope_part += _field(b"\x1a", scope.schema_url.encode())
    if len(_HEADS) >= 64:
        _HEADS.clear()
    _HEADS[(id(resource), id(scope))] = (resource, scope, resource_part, scope_part)
    return resource_part, scope_part


def export_request(spans: Sequence[Any]) -> bytes:
    """The ExportTraceServiceRequest for `spans`, grouped by resource then scope."""
    groups: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
    for s in spans:
        resource, scope = s.resource, s.instrumentation_scope or None
        by_scope = groups.get(id(resource))
        if by_scope is None:
            by_scope = groups[id(resource)] = (resource, {})
        entry = by_scope[1].get(id(scope))
        if entry is None:
            entry = by_scope[1][id(scope)] = (scope, [])
        wire = getattr(s, "wire", None)  # a span that came encoded (WiredSpan)
        entry[1].append(wire if wire is not None else _field(b"\x12", span(s)))
    out = []
    for resource, scopes in groups.values():
        resource_part = b""
        scope_spans = []
        for scope, encoded in scopes.values():  # field order is free in protobuf
            resource_part, scope_part = _heads(resource, scope)
            scope_spans.append(_field(b"\x12", scope_part + b"".join(encoded)))
        out.append(_field(b"\x0a", resource_part + b"".join(scope_spans)))
    return b"".join(out)


def export_wire(resource: Any, scope: Any, spans: Sequence[bytes]) -> bytes:
    """The ExportTraceServiceRequest for spans of one resource and scope that came as their
    encoded `ScopeSpans.spans` fields (span_field's)."""
    resource_part, scope_part = _heads(resource, scope)
    return _field(b"\x0a", resource_part + _field(b"\x12", scope_part + b"".join(spans)))
