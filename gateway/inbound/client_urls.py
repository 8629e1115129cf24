"""Which URLs a client may hand the gateway to pass on, sans-IO.

The gateway fetches no client URL, but it passes them on, and some upstreams read what
they are given with the gateway's own cloud identity: Gemini and Vertex read a `gs://`
`fileUri` as the project's service agent, so a tenant could name an operator's bucket.
An image or file URL from a client must therefore be `http://`, `https://` or `data:`
(compared case-insensitively, after leading whitespace and control characters, which URL
parsers skip); anything else, a URL without a scheme included, is a 400
`unsupported_url_scheme` naming the field, unless every provider the request may be sent
to sets `allow_storage_uris: true`.

`check_request` looks where each inbound API carries URLs: in the client's own body when
there is one (`NativeRequest`: Responses, Messages; it holds everything the translation
was built from, in the client's own field paths), else in the canonical chat messages.
A request with no content parts costs one type check per message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol

from gateway.errors import BadRequest

if TYPE_CHECKING:
    from gateway.config import ProviderConfig
    from gateway.providers.base import NativeRequest
    from gateway.wire.openai_chat import Message

__all__ = ["UnsupportedUrlScheme", "check_request", "url_allowed"]

ALLOWED_PREFIXES = ("http://", "https://", "data:")
# What WHATWG URL parsing drops before a scheme (C0 controls and space), and the other
# whitespace `str.strip` knows, so that " gs://x" is judged as "gs://x".
_LEADING = "".join(map(chr, range(0x21))) + (
    "\x7f\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_PREFIX_LEN = max(map(len, ALLOWED_PREFIXES))


class Planned(Protocol):
    """An attempt of the request's plan (routing's `Attempt`, which this sans-IO module
    does not import)."""

    @property
    def provider(self) -> ProviderConfig: ...


class UnsupportedUrlScheme(BadRequest):
    code = "unsupported_url_scheme"


def url_allowed(url: str) -> bool:
    """Whether `url` is http(s) or a data: URL: the only kinds no upstream reads with the
    gateway's identity."""
    return url.lstrip(_LEADING)[:_PREFIX_LEN].lower().startswith(ALLOWED_PREFIXES)


def refusal(param: str) -> UnsupportedUrlScheme:
    return UnsupportedUrlScheme(
        "only http://, https:// and data: URLs are accepted here", param=param
    )


def check_request(
    messages: list[Message], native: NativeRequest | None, plan: Sequence[Planned]
) -> None:
    """Raise `UnsupportedUrlScheme` for the first client URL that is not http(s) or data:,
    unless every provider in `plan` allows storage URIs (asked only once one is found)."""
    if native is None:
        bad = _chat_messages(messages)
    elif native.api == "responses":
        bad = _responses_body(native.body)
    elif native.api == "messages":
        bad = _messages_body(native.body)
    else:
        bad = _chat_messages(messages)
    if bad is not None and not all(a.provider.allow_storage_uris for a in plan):
        raise refusal(bad)


# Each walker returns the field path of the first URL not allowed, or None.


def _chat_messages(messages: list[Message]) -> str | None:
    for i, message in enumerate(messages):
        content = message.content
        if type(content) is list:
            bad = _parts(content)
            if bad is not None:
                return f"messages[{i}].content{bad}"
    return None


def _parts(parts: list[Any]) -> str | None:
    """The path (`[j].field`) of the first part of `parts` with a URL not allowed."""
    for j, part in enumerate(parts):
        bad = _part(part)
        if bad is not None:
            return f"[{j}].{bad}"
    return None


def _part(part: Any) -> str | None:
    """A content part of Chat Completions or Responses: every `*_url` field (image_url,
    file_url, and the video_url / audio_url some OpenAI-compatible servers fetch), as a
    string or as `{url}`, `file_data`, and the same fields inside a chat `file` part."""
    if type(part) is not dict:
        return None
    bad = _url_fields(part)
    if bad is not None:
        return bad
    file = part.get("file")
    if type(file) is dict:
        bad = _url_fields(file)
        if bad is not None:
            return f"file.{bad}"
    return None


def _url_fields(fields: dict[str, Any]) -> str | None:
    for key, value in fields.items():
        if key.endswith("_url"):
            if type(value) is str:
                if not url_allowed(value):
                    return key
            elif type(value) is dict:
                url = value.get("url")
                if type(url) is str and not url_allowed(url):
                    return f"{key}.url"
        elif key == "file_data" and type(value) is str and not _data_allowed(value):
            return key
    return None


def _data_allowed(data: str) -> bool:
    """`file_data` is a data: URL or bare base64 (which has no `:`, so names no scheme)."""
    return ":" not in data or url_allowed(data)


def _responses_body(body: dict[str, Any]) -> str | None:
    items = body.get("input")
    if type(items) is not list:
        return None
    for i, item in enumerate(items):
        if type(item) is not dict:
            continue
        for field in ("content", "output"):  # a message's parts, a tool output's parts
            parts = item.get(field)
            if type(parts) is list:
                bad = _parts(parts)
                if bad is not None:
                    return f"input[{i}].{field}{bad}"
    return None


def _messages_body(body: dict[str, Any]) -> str | None:
    turns = body.get("messages")
    if type(turns) is not list:
        return None
    for i, turn in enumerate(turns):
        blocks = turn.get("content") if type(turn) is dict else None
        if type(blocks) is list:
            bad = _blocks(blocks, f"messages[{i}].content")
            if bad is not None:
                return bad
    return None


# tool_result -> document -> source.content -> image is as deep as Anthropic's blocks go;
# the bound keeps a hostile body's nesting from costing more
_BLOCK_DEPTH = 3


def _blocks(blocks: list[Any], at: str, depth: int = 1) -> str | None:
    """Anthropic content blocks: an `image` or `document` whose source has a `url` (type
    `url`), also inside a `tool_result`'s content and a document's `content` source."""
    for j, block in enumerate(blocks):
        if type(block) is not dict:
            continue
        source = block.get("source")
        if type(source) is dict:
            url = source.get("url")
            if type(url) is str and not url_allowed(url):
                return f"{at}[{j}].source.url"
            inner = source.get("content")
            if depth < _BLOCK_DEPTH and type(inner) is list:
                bad = _blocks(inner, f"{at}[{j}].source.content", depth + 1)
                if bad is not None:
                    return bad
        inner = block.get("content")
        if depth < _BLOCK_DEPTH and type(inner) is list:
            bad = _blocks(inner, f"{at}[{j}].content", depth + 1)
            if bad is not None:
                return bad
    return None
