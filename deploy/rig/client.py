"""The rig's load client: chat requests over aiohttp, each answer checked in full.

A stream is read as SSE event by event: the text and every tool call (id, name, arguments
parsed as JSON) must be exactly what the fake upstream's scenario sends, the finish reason
right, a usage chunk present, `data: [DONE]` last and no error event anywhere. A
non-streaming answer must carry the text and the cost header. Anything else, and any status
but 200, is a failure with its reason (a 429 is an expected refusal only where a phase says
so). Latency is request sent -> answer read completely.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.upstreams.openai_upstream import EXPECTED_ARGS, TEXT_PIECES

TEXT = "".join(TEXT_PIECES)
MAX_TOKENS = 16
REQUEST_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Expected:
    text: str
    calls: tuple[str, ...]  # tool names in index order
    finish: str


# configured model -> what its upstream scenario answers (deploy/rig/phases.py's config)
SCENARIOS = {
    "rig-text": ("text", Expected(TEXT, (), "stop")),
    "rig-tools": ("interleaved-2", Expected("", ("search_documents", "get_user"), "tool_calls")),
    "rig-call": ("text-then-call", Expected(TEXT, ("get_weather",), "tool_calls")),
    "rig-think": ("think", Expected(TEXT, (), "stop")),
}


@dataclass(frozen=True)
class Kind:
    model: str
    stream: bool

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": "What is in the quarterly report?"}],
            "max_tokens": MAX_TOKENS,
        }
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body


STEADY_MIX = (
    Kind("rig-text", True),
    Kind("rig-tools", True),
    Kind("rig-call", True),
    Kind("rig-text", False),
)
# One request in five holds its stream open for a second (the upstream "thinks"), so that a
# gateway stopped mid-load has streams in flight. Five, an odd length: nginx alternates the
# two gateways, and with an even one every long stream would land on the same gateway.
RESTART_MIX = (Kind("rig-think", True), *STEADY_MIX)


@dataclass
class Outcome:
    kind: Kind
    base: str  # where it was sent: nginx or one gateway
    started: float  # time.monotonic()
    ended: float
    status: int
    failure: str | None  # why the answer is wrong; None when it is right
    upstream: str  # nginx's X-Rig-Upstream ("" when sent to a gateway directly)
    cost_usd: float | None = None
    code: str | None = None  # the error code of a non-200 answer
    answered: float | None = None  # when its status and headers arrived (monotonic)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.failure is None

    @property
    def latency(self) -> float:
        return self.ended - self.started

    def served_by(self, address: str) -> bool:
        """Whether `address` gave the answer (the last gateway nginx tried)."""
        return self.upstream.rsplit(", ", 1)[-1] == address


def check_stream_events(kind: Kind, events: list[str]) -> tuple[str | None, float | None]:
    """(what is wrong with the stream or None, the usage chunk's cost_usd)."""
    expected = SCENARIOS[kind.model][1]
    if not events or events[-1] != "[DONE]":
        return "the stream did not end with data: [DONE]", None
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    finish = None
    cost = None
    for data in events[:-1]:
        chunk = json.loads(data)
        if "error" in chunk:
            return f"error event: {chunk['error']}", None
        if chunk.get("usage"):
            cost = chunk["usage"].get("cost_usd")
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                slot = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                slot["id"] += call.get("id") or ""
                function = call.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    if "".join(text) != expected.text:
        return f"text {''.join(text)!r} != {expected.text!r}", cost
    names = tuple(calls[i]["name"] for i in sorted(calls))
    if names != expected.calls:
        return f"tool calls {names} != {expected.calls}", cost
    for call in calls.values():
        try:
            arguments = json.loads(call["arguments"])
        except ValueError:
            arguments = None
        if arguments != EXPECTED_ARGS[call["name"]]:
            return f"{call['name']} arguments {call['arguments']!r}", cost
    if len({call["id"] for call in calls.values()}) != len(calls) or not all(
        call["id"] for call in calls.values()
    ):
        return f"tool call ids missing or repeated: {calls}", cost
    if finish != expected.finish:
        return f"finish_reason {finish!r} != {expected.finish!r}", cost
    if cost is None:
        return "no usage chunk with cost_usd", cost
    return None, cost


async def read_events(answer: aiohttp.ClientResponse) -> list[str]:
    """The `data:` payloads of an SSE body, in order (comments such as keep-alives skipped)."""
    events: list[str] = []
    data: list[str] = []
    async for raw in answer.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            events.append("\n".join(data))
            data = []
    if data:
        events.append("\n".join(data))
    return events


async def send(
    session: aiohttp.ClientSession,
    base: str,
    key: str,
    kind: Kind,
    answering: Callable[[str], None] | None = None,
) -> Outcome:
    """One request to `base` (nginx or a gateway), checked; never raises for a bad answer.
    `answering` is told who answers (X-Rig-Upstream) as soon as the headers arrive."""
    started = time.monotonic()
    status, failure, upstream, cost, code, answered = 0, None, "", None, None, None
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with session.post(
            f"{base}/v1/chat/completions", json=kind.body(), headers=headers
        ) as answer:
            status = answer.status
            upstream = answer.headers.get("X-Rig-Upstream", "")
            answered = time.monotonic()
            if answering is not None:
                answering(upstream)
            if status != 200:
                body = await answer.read()
                failure = f"HTTP {status}: {body[:300]!r}"
                try:
                    code = json.loads(body)["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    code = None
            elif kind.stream:
                failure, cost = check_stream_events(kind, await read_events(answer))
            else:
                failure, cost = check_completion(await answer.json(), answer.headers)
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
        # a broken answer (bad JSON, a missing field) is a failure to count, like a reset
        failure = f"{type(exc).__name__}: {exc}"
    ended = time.monotonic()
    return Outcome(kind, base, started, ended, status, failure, upstream, cost, code, answered)


def check_completion(body: Any, headers: Any) -> tuple[str | None, float | None]:
    message = body["choices"][0]["message"]
    if message.get("content") != TEXT:
        return f"content {message.get('content')!r} != {TEXT!r}", None
    if "x-gateway-cost-usd" not in headers:
        return "no x-gateway-cost-usd header", None
    return None, float(headers["x-gateway-cost-usd"])


@dataclass
class Load:
    """A bounded load: `concurrency` workers, each sending one request after another, until
    `duration_s` has passed, `max_requests` were sent, or `stop` is set."""

    bases: tuple[str, ...]  # where to send; request i goes to bases[i % len]
    key: str
    mix: tuple[Kind, ...]
    concurrency: int
    duration_s: float
    max_requests: int
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    outcomes: list[Outcome] = field(default_factory=list)
    elapsed_s: float = 0.0
    # request index -> (kind, who answers, when its headers came): answers being read now
    answering: dict[int, tuple[Kind, str, float]] = field(default_factory=dict)

    async def run(self, session: aiohttp.ClientSession) -> Load:
        sent = 0
        deadline = time.monotonic() + self.duration_s

        async def worker() -> None:
            nonlocal sent
            while not self.stop.is_set() and time.monotonic() < deadline:
                if sent >= self.max_requests:
                    return
                index, sent = sent, sent + 1
                base = self.bases[index % len(self.bases)]
                kind = self.mix[index % len(self.mix)]
                answering = functools.partial(self._answering, index, kind)
                self.outcomes.append(await send(session, base, self.key, kind, answering))
                self.answering.pop(index, None)

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        self.elapsed_s = time.monotonic() - started
        return self

    def _answering(self, index: int, kind: Kind, upstream: str) -> None:
        self.answering[index] = (kind, upstream, time.monotonic())

    def answering_for(self, model: str, address: str) -> list[float]:
        """How long (s) each request of `model` that `address` is answering right now has
        been answered (headers received, body still coming)."""
        now = time.monotonic()
        return [
            now - since
            for kind, upstream, since in self.answering.values()
            if kind.model == model and upstream.rsplit(", ", 1)[-1] == address
        ]

    @property
    def failures(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if not outcome.ok]

    @property
    def streams(self) -> int:
        return sum(outcome.kind.stream for outcome in self.outcomes)

    @property
    def rps(self) -> float:
        return len(self.outcomes) / self.elapsed_s if self.elapsed_s else 0.0

    def percentile_ms(self, fraction: float) -> float:
        latencies = sorted(outcome.latency for outcome in self.outcomes)
        if not latencies:
            return math.nan
        rank = max(0, math.ceil(fraction * len(latencies)) - 1)  # nearest-rank
        return latencies[rank] * 1000


def client_session(connections: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=connections)
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    )
