"""Finding tool-call envelopes in a model's text, incrementally.

A model without native tools is asked (see `request.py`) to answer a call with one JSON object,
`{"tool_calls": [{"name": ..., "arguments": {...}}]}`. Models follow that loosely: the object
comes after a sentence, inside a ```json fence, as a bare `{"name": ..., "arguments": ...}`,
with `parameters` for `arguments`, with the arguments as a JSON string, or several objects in
one answer. `EnvelopeScanner` takes the text in whatever pieces it arrives and returns, in
order, the text that is not an envelope and the calls the envelopes hold. Whatever is not a
valid envelope naming only known tools stays text, byte for byte: nothing is lost.

Sans-IO: text in, pieces out. Splitting the text anywhere gives the same pieces joined.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from gateway.wire import DECODE_ERRORS

ENVELOPE_KEYS = frozenset({"tool_calls", "name", "arguments", "parameters", "function", "type"})
MAX_ENVELOPE_CHARS = 1 << 20  # a candidate longer than this is text, not a call
_FENCE = "```"
_FENCE_INFO = re.compile(r"[A-Za-z0-9_+-]*")
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_json = msgspec.json.Decoder()
_encode = msgspec.json.encode


class EmulatedCall(msgspec.Struct, frozen=True, gc=False):
    name: str
    arguments: str  # a JSON object, compact


Piece = str | EmulatedCall


def calls_in(candidate: str, names: frozenset[str]) -> list[EmulatedCall] | None:
    """The calls a complete JSON object holds, or None when it is not an envelope of known
    tools (then the caller keeps it as text)."""
    value = _decode(candidate)
    if not isinstance(value, dict):
        return None
    items = value.get("tool_calls") if "tool_calls" in value else [value]
    if not isinstance(items, list) or not items:
        return None
    calls = []
    for item in items:
        call = _call(item, names)
        if call is None:
            return None
        calls.append(call)
    return calls


def _decode(text: str) -> Any:
    try:
        return _json.decode(text)
    except DECODE_ERRORS:
        pass
    try:  # the one slip models make often: a comma before a closing bracket
        return _json.decode(_TRAILING_COMMA.sub(r"\1", text))
    except DECODE_ERRORS:
        return None


def _call(item: Any, names: frozenset[str]) -> EmulatedCall | None:
    if not isinstance(item, dict):
        return None
    function = item.get("function")
    if isinstance(function, dict):  # the OpenAI shape: {"type": "function", "function": {...}}
        item = function
    name = item.get("name")
    if not isinstance(name, str) or name not in names:
        return None
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):
        arguments = _decode(arguments) if arguments.strip() else {}
    if not isinstance(arguments, dict):
        return None
    return EmulatedCall(name, _encode(arguments).decode())


class EnvelopeScanner:
    """Splits one choice's text, fed in pieces, into text and calls.

    Text is returned as soon as it cannot be the start of an envelope, so prose streams with
    no delay; from a `{` (or a ``` fence followed by `{`) the text is held until the object
    closes, then returned as calls if it is an envelope, as text otherwise. Whitespace around
    an envelope is its formatting and is dropped with it (a lone call has no content).
    """

    def __init__(self, names: frozenset[str]) -> None:
        self._names = names
        self._pending = ""  # undecided text outside an object: backticks, a fence head
        self._object: list[str] | None = None  # the held candidate, from its `{`
        self._fence = ""  # the fence head before the held candidate
        self._size = 0
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._key_checked = False
        self._after_fence_call = False  # a closing ``` to drop may follow
        self._after_call = False  # whitespace that follows a call is dropped
        self._space = ""  # trailing whitespace of the text so far, held back

    def feed(self, text: str) -> list[Piece]:
        out: list[Piece] = []
        while text:
            if self._object is not None:
                text = self._object_feed(text, out)
            else:
                text = self._text_feed(text, out)
        return out

    def close(self) -> list[Piece]:
        """The text ended: whatever is held is text after all."""
        out: list[Piece] = []
        if self._object is not None:
            self._text(out, self._fence + "".join(self._object))
            self._object = None
        if self._pending:
            self._text(out, self._pending)
            self._pending = ""
        if self._space and not self._after_call:
            out.append(self._space)
        self._space = ""
        return out

    # --- outside an object -----------------------------------------------------------------

    def _text_feed(self, text: str, out: list[Piece]) -> str:
        """Return text up to the next possible envelope start; the rest, from a `{`, goes on
        to the object scanner ("" when nothing more can be decided yet)."""
        buf = self._pending + text
        self._pending = ""
        if self._after_fence_call:
            stripped = buf.lstrip()
            if not stripped or (_FENCE.startswith(stripped) and stripped != _FENCE):
                self._pending = buf  # wait: the closing fence may still come
                return ""
            self._after_fence_call = False
            if stripped.startswith(_FENCE):
                buf = stripped[len(_FENCE) :]
        while buf:
            brace, tick = buf.find("{"), buf.find("`")
            start = min((i for i in (brace, tick) if i >= 0), default=len(buf))
            self._text(out, buf[:start])
            buf = buf[start:]
            if not buf:
                return ""
            if buf[0] == "{":
                self._begin("")
                return buf
            opened = _fence_object_at(buf)
            if opened is None:
                self._pending = buf
                return ""
            if opened > 0:
                self._begin(buf[:opened])
                return buf[opened:]
            skip = len(_FENCE) if buf.startswith(_FENCE) else 1
            self._text(out, buf[:skip])
            buf = buf[skip:]
        return ""

    def _begin(self, fence: str) -> None:
        self._object = []
        self._fence = fence
        self._size = 0
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._key_checked = False

    # --- inside an object ------------------------------------------------------------------

    def _object_feed(self, text: str, out: list[Piece]) -> str:
        """Scan `text` as the held object's continuation; return the text after the object
        (or after a rejected `{`), "" when the object is still open."""
        assert self._object is not None
        if not self._key_checked:
            head = "".join(self._object) + text
            verdict = _first_key_verdict(head)
            if verdict is None:
                self._object = [head]
                return ""
            if not verdict:  # not an envelope: the `{` is text, scanning goes on after it
                self._text(out, self._fence + "{")
                self._object = None
                return head[1:]
            self._key_checked = True
            self._object = []
            text = head
        end = self._scan(text)
        if end < 0:
            self._object.append(text)
            self._size += len(text)
            if self._size > MAX_ENVELOPE_CHARS:
                self._text(out, self._fence + "".join(self._object))
                self._object = None
            return ""
        self._object.append(text[:end])
        candidate = "".join(self._object)
        self._object = None
        calls = calls_in(candidate, self._names)
        if calls is None:
            self._text(out, self._fence + candidate)
        else:
            self._space = ""
            out.extend(calls)
            self._after_call = True
            self._after_fence_call = bool(self._fence)
        return text[end:]

    def _scan(self, text: str) -> int:
        """Follow the object's nesting through `text`: the index just after its closing
        brace, or -1 (state kept for the next piece)."""
        depth, in_string = self._depth, self._in_string
        skip_to = 1 if self._escaped else 0
        self._escaped = False
        for match in _JSON_SPECIAL.finditer(text, skip_to):
            at = match.start()
            if at < skip_to:
                continue
            ch = text[at]
            if in_string:
                if ch == "\\":
                    skip_to = at + 2
                    if skip_to > len(text):
                        self._escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    self._depth, self._in_string = 0, False
                    return at + 1
        self._depth, self._in_string = depth, in_string
        return -1

    # --- output ----------------------------------------------------------------------------

    def _text(self, out: list[Piece], text: str) -> None:
        if self._after_call:
            text = text.lstrip()
            if not text:
                return
            self._after_call = False
        body = text.rstrip()
        if not body:
            self._space += text
            return
        out.append(self._space + body)
        self._space = text[len(body) :]


_JSON_SPECIAL = re.compile(r'[{}"\\]')


def _fence_object_at(buf: str) -> int | None:
    """Where the `{` of "```json\\n{" is in `buf` (which starts with a backtick); -1 if it
    does not open a fenced object; None if it cannot tell yet."""
    if len(buf) < len(_FENCE):
        return None if _FENCE.startswith(buf) else -1
    if not buf.startswith(_FENCE):
        return -1
    info = _FENCE_INFO.match(buf, len(_FENCE))
    assert info is not None
    at = info.end()
    # The bounds hold whether or not more text follows, so that cuts change nothing.
    if at - len(_FENCE) > 16:
        return -1
    if at == len(buf):
        return None
    rest = buf[at:]
    if not rest[0].isspace():
        return -1
    stripped = rest.lstrip()
    if len(rest) - len(stripped) > 64:
        return -1
    if not stripped:
        return None
    return at + len(rest) - len(stripped) if stripped[0] == "{" else -1


def _first_key_verdict(head: str) -> bool | None:
    """Whether the object starting `head` has an envelope's first key (one of
    ENVELOPE_KEYS), decided as soon as that key is complete so that a `{` in prose ("a set
    {1, 2}") is text at once; None: cannot tell yet."""
    at = 1
    while at < len(head) and head[at].isspace():
        at += 1
    if at > 64:  # whether or not the key follows: cuts change nothing
        return False
    if at == len(head):
        return None
    if head[at] != '"':
        return False
    close = head.find('"', at + 1)
    if close < 0:
        return None if len(head) - at <= 16 else False
    return head[at + 1 : close] in ENVELOPE_KEYS
