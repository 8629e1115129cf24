"""The limits of `server.limits`: what one request may carry and how many may run at once
(docs/api.md, "Limits"). The connection-level limits (header size, slow heads and bodies)
are gateway/server/connection.py's.

Request shape: each inbound API checks its own request, so that `param` names the field in
the client's terms: Chat Completions (`messages[2].tool_calls[0].function.arguments`),
Anthropic Messages (`messages[2].content[1].input`), Responses (`input[3].arguments`). A
request over a limit is a 400 before anything is admitted or sent upstream.

Concurrency: `StreamSlots` counts the inference requests in flight in this process (every
request `serve_chat` serves, streaming or not, and every embeddings and count_tokens call),
in total and per virtual key (the bearer's hash; the master key and a bearer-less open
gateway count only toward the total). A full gateway answers 503 `too_many_streams`, a key
at its own limit 429 `too_many_streams_for_key`, both with `Retry-After: 1`. A slot is held
until the answer has been written (for a stream, its last byte).

Defaults that never refuse legitimate load: no per-key cap unless one is configured (one key
with a batch job is not refused by a gateway nowhere near full), and a process cap set by
what the process can hold when none is configured. The hard limit a process meets first is
its file descriptors: past it, accept() and connect() fail for every request at once. Each
request in flight holds two (the client's connection and its upstream connection), and
`RESERVED_FDS` are kept for listeners, the store, logs and idle pooled connections:
`(RLIMIT_NOFILE soft - RESERVED_FDS) // 2`; at this machine's 20,000 that is 9,872. In a
container with a memory limit the cap is also at most what the process's share of it holds
(server/memory_limit.py: 64 MiB, then 40 KiB per stream; 11,468 in 512 MiB), since past the
memory limit the kernel kills the process and every stream with it.
"""

from __future__ import annotations

import logging
import resource
from typing import Any
from typing import Literal

import msgspec
from aiohttp import web

from gateway.accounting.service import Principal
from gateway.config import LimitsConfig
from gateway.errors import BadRequest
from gateway.errors import GatewayError
from gateway.errors import NoUpstreamAvailable
from gateway.errors import RateLimited
from gateway.server.memory_limit import container_memory_bytes
from gateway.server.memory_limit import streams_in_memory
from gateway.wire.openai_chat import ChatRequest

log = logging.getLogger("gateway.server")
RETRY_AFTER_S = "1"
_json = msgspec.json.Encoder()


class TooManyStreams(NoUpstreamAvailable):
    code = "too_many_streams"


class TooManyStreamsForKey(RateLimited):
    code = "too_many_streams_for_key"


# --- request shape -----------------------------------------------------------------------


def _over(text: str, limit: int) -> bool:
    """Whether `text` is over `limit` bytes as UTF-8; encodes only when the length in
    characters cannot tell (a character is 1 to 4 bytes)."""
    chars = len(text)
    if chars > limit:
        return True
    if chars * 4 <= limit:
        return False
    return len(text.encode("utf-8", "surrogatepass")) > limit


def _count(items: object, limit: int, param: str, what: str) -> None:
    if isinstance(items, list) and len(items) > limit:
        raise BadRequest(
            f"'{param}' has {len(items)} {what}; the limit is {limit}",
            param=param,
            code="too_many_items",
        )


def _argument_too_large(param: str, limit: int) -> BadRequest:
    return BadRequest(
        f"'{param}' is larger than the limit of {limit} bytes", param=param, code="too_large"
    )


def check_chat(chat: ChatRequest, limits: LimitsConfig) -> None:
    """A Chat Completions request against the limits. On the hot path: a request whose
    tool arguments are all short is one pass of attribute reads."""
    messages = chat.messages
    _count(messages, limits.max_messages, "messages", "messages")
    _count(chat.tools, limits.max_tools, "tools", "tools")
    cap = limits.max_tool_argument_bytes
    surely_under = cap // 4  # characters that cannot be more than `cap` bytes
    for message in messages:
        calls = message.tool_calls  # UNSET and None are falsy
        if calls:
            for call in calls:
                if len(call.function.arguments) > surely_under:
                    _check_chat_arguments(chat, cap)
                    break


def _check_chat_arguments(chat: ChatRequest, cap: int) -> None:
    for i, message in enumerate(chat.messages):
        for j, call in enumerate(message.tool_calls or ()):
            if _over(call.function.arguments, cap):
                raise _argument_too_large(f"messages[{i}].tool_calls[{j}].function.arguments", cap)


def check_messages(body: dict[str, Any], limits: LimitsConfig) -> None:
    """An Anthropic Messages request (its JSON body, already type-checked) against the
    limits; a `tool_use` block's `input` is measured as JSON."""
    messages = body.get("messages")
    _count(messages, limits.max_messages, "messages", "messages")
    _count(body.get("tools"), limits.max_tools, "tools", "tools")
    if not isinstance(messages, list):
        return
    cap = limits.max_tool_argument_bytes
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            arguments = block.get("input")
            if isinstance(arguments, str):
                too_large = _over(arguments, cap)
            else:
                too_large = len(_json.encode(arguments)) > cap
            if too_large:
                raise _argument_too_large(f"messages[{i}].content[{j}].input", cap)


def check_responses(body: dict[str, Any], limits: LimitsConfig) -> None:
    """A Responses request's own `input` (not the history a `previous_response_id` adds)
    and `tools` against the limits."""
    items = body.get("input")
    _count(items, limits.max_messages, "input", "items")
    _count(body.get("tools"), limits.max_tools, "tools", "tools")
    if not isinstance(items, list):
        return
    cap = limits.max_tool_argument_bytes
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("type") != "function_call":
            continue
        arguments = item.get("arguments")
        if isinstance(arguments, str) and _over(arguments, cap):
            raise _argument_too_large(f"input[{i}].arguments", cap)


# --- concurrency -------------------------------------------------------------------------


class StreamSlots:
    """Inference requests in flight in this process, in total and per key."""

    __slots__ = ("_per_key", "_per_key_limit", "_total_limit", "by_key", "limit", "total")

    def __init__(
        self,
        limits: LimitsConfig,
        nofile: int | None = None,
        *,
        memory_bytes: int | Literal["cgroup"] | None = "cgroup",
        workers: int = 1,
    ) -> None:
        total = limits.max_concurrent_streams
        self._total_limit = (
            total
            if total is not None
            else derived_stream_limit(nofile, memory_bytes=memory_bytes, workers=workers)
        )
        self._per_key_limit = limits.max_concurrent_streams_per_key
        self.limit = self._total_limit
        self.total = 0
        self.by_key: dict[str, int] = {}  # only keys with a request in flight

    def take(self, principal: Principal) -> str:
        """Hold a slot for `principal`'s request; the key it counts under ("" for none).
        Raises 503 when the process is full, 429 when the key is at its own limit."""
        if self.total >= self._total_limit:
            raise _with_retry_after(
                TooManyStreams(
                    f"The gateway is serving its limit of {self._total_limit} concurrent "
                    "requests; retry shortly"
                )
            )
        key = principal.secret_hash
        if key:
            held = self.by_key.get(key, 0)
            per_key = self._per_key_limit
            if per_key is not None and held >= per_key:
                raise _with_retry_after(
                    TooManyStreamsForKey(
                        f"This key already has {held} requests in flight, its limit; retry "
                        "when one ends"
                    )
                )
            self.by_key[key] = held + 1
        self.total += 1
        return key

    def give_back(self, key: str) -> None:
        self.total -= 1
        if key:
            held = self.by_key[key] - 1
            if held:
                self.by_key[key] = held
            else:
                del self.by_key[key]  # bounded by the keys in flight, not every key seen


SLOTS = web.AppKey("stream_slots", StreamSlots)

RESERVED_FDS = 256  # listeners, the store, logs, idle pooled upstream connections
FDS_PER_STREAM = 2  # the client's connection and the upstream one


NOFILE_CEILING = 1 << 20  # what raising the soft limit aims for at most


def raise_descriptor_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (at most NOFILE_CEILING),
    as a server that holds a connection per client should: the soft default (often 1,024)
    would cap a gateway at a few hundred streams on a host that allows far more. Workers
    inherit it. Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NOFILE_CEILING if hard == resource.RLIM_INFINITY else min(hard, NOFILE_CEILING)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            log.warning("could not raise the descriptor limit from %d to %d", soft, target)
    return soft


def derived_stream_limit(
    nofile: int | None = None,
    memory_bytes: int | Literal["cgroup"] | None = "cgroup",
    workers: int = 1,
) -> int:
    """The requests a process can hold at once when `max_concurrent_streams` is not set:
    what its descriptor limit (`nofile`, else the process's soft RLIMIT_NOFILE) leaves after
    `RESERVED_FDS`, two per request, and at most what its share of the container's memory
    limit holds (`memory_bytes`: "cgroup" reads the cgroup's, None is no limit; shared by
    `workers` processes; server/memory_limit.py); at least 64."""
    if nofile is None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        nofile = soft if soft != resource.RLIM_INFINITY else 1 << 20
    limit = (nofile - RESERVED_FDS) // FDS_PER_STREAM
    if memory_bytes == "cgroup":
        memory_bytes = container_memory_bytes()
    if isinstance(memory_bytes, int):
        limit = min(limit, streams_in_memory(memory_bytes, workers))
    return max(64, limit)


def _with_retry_after(err: GatewayError) -> GatewayError:
    err.headers["Retry-After"] = RETRY_AFTER_S
    return err
