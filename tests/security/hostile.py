"""Helpers of the hostile-tenant suite (tests/security/test_hostile_tenant.py): the gateways of
each store, a client that alternates between them, upstreams that bill what they are sent,
the reservation rule by the test's own arithmetic, a slowloris client and the figures table.

Everything listens on 127.0.0.1; every gateway and redis-server is a process this module
started, stopped by its own PID.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import select
import socket
import time
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import TypeVar

import httpx
from aiohttp import web

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.redis_server import RedisServer
from tests.upstreams.anthropic_upstream import FakeAnthropic
from tests.upstreams.embeddings_upstream import FakeEmbeddings
from tests.upstreams.gemini_upstream import FakeGemini
from tests.upstreams.openai_upstream import TEXT_PIECES
from tests.upstreams.openai_upstream import FakeOpenAI
from tests.upstreams.openai_upstream import Recorded

MASTER = "sk-master-hostile-1"
# USD per million tokens, which is microdollars per token
INPUT_PRICE, OUTPUT_PRICE = 2, 8
NANOS_PER_MICRO = 1000
DEFAULT_OUTPUT_CAP = 4096  # gateway/accounting/usage.py: the output cap of a request without one
CHARS_PER_TOKEN = 4
BILLED_COMPLETION = 7  # what the billing upstream answers: completion tokens per choice
HEADER_TIMEOUT_S = 1.0  # server.client_header_timeout_s of every gateway here
HOLD_S = 1.0  # how long the `hold` model answers after: requests really in flight together
STORES = ("memory", "sqlite-workers", "redis-processes")

T = TypeVar("T")


# --- upstreams ------------------------------------------------------------------------------


class BillingOpenAI(FakeOpenAI):
    """FakeOpenAI whose `text` and `hold` scenarios bill what they are sent, as a real
    upstream does: `prompt_tokens` is the request body's bytes / 4 (rounded up), so a stored
    history sent upstream costs what it weighs, and `completion_tokens` is 7 per choice
    (`n`; at most max tokens). `hold` waits HOLD_S before anything, headers included. Both
    stream (usage last, when asked for) or answer whole. Every other scenario is
    FakeOpenAI's; every request is recorded (`requests`, and the raw bodies in `raw`)."""

    name = "billing-openai"

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[bytes] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._billed)

    async def _billed(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw)
        scenario = body.get("model")
        if scenario not in ("text", "hold"):
            return await self._chat(request)  # the body is cached: read again there
        self.raw.append(raw)
        self.requests.append(Recorded(dict(request.headers), body))
        if scenario == "hold":
            await asyncio.sleep(HOLD_S)
        usage = billed_usage(raw, body)
        text = "".join(TEXT_PIECES)
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "chatcmpl-billed",
                    "object": "chat.completion",
                    "created": 1754693439,
                    "model": "billed-model",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        events = [self._chunk({"role": "assistant", "content": ""})]
        events += [self._chunk({"content": piece}) for piece in TEXT_PIECES]
        events.append(self._chunk({}, "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(self._chunk(None, usage=usage, include_usage=True))
        events.append(b"data: [DONE]\n\n")
        await response.write(b"".join(events))
        self.finished += 1
        return response


def billed_usage(raw: bytes, body: dict[str, Any]) -> dict[str, int]:
    """The usage BillingOpenAI reports for a request body."""
    prompt = tokens_of(len(raw))
    cap = body.get("max_completion_tokens") or body.get("max_tokens") or BILLED_COMPLETION
    n = body.get("n")
    choices = n if isinstance(n, int) and n > 1 else 1
    completion = min(BILLED_COMPLETION, cap) * choices
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class LaggingEmbeddings(FakeEmbeddings):
    """FakeEmbeddings with one more OpenAI model, `lag`: answered like any other, after
    HOLD_S (FakeEmbeddings' own `slow` takes five seconds)."""

    name = "lagging-embeddings"

    def __init__(self) -> None:
        super().__init__()
        self.lagging = 0  # `lag` requests that arrived (counted before their wait)

    async def _openai(self, request: web.Request) -> web.Response:
        if json.loads(await request.read()).get("model") == "lag":  # the body is cached
            self.lagging += 1
            await asyncio.sleep(HOLD_S)
        return await super()._openai(request)


@dataclass
class Upstreams:
    openai: BillingOpenAI
    anthropic: FakeAnthropic
    embeddings: LaggingEmbeddings
    gemini: FakeGemini

    @classmethod
    @contextmanager
    def running(cls) -> Iterator[Upstreams]:
        started: list[Any] = []
        try:
            for fake in (BillingOpenAI(), FakeAnthropic(), LaggingEmbeddings(), FakeGemini()):
                started.append(fake.start())  # noqa: PERF401 (one by one: stop those started)
            yield cls(*started)
        finally:
            for fake in started:
                fake.stop()


# --- the reservation rule, by the test's own arithmetic --------------------------------------


def tokens_of(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def reserve_nanos(body: bytes, output_cap: int, history_bytes: int = 0) -> int:
    """What the gateway reserves: the prompt estimate (ceil((body + stored history) bytes / 4)
    tokens) at the input price plus the output cap (max tokens x n, or 4096 x n) at the
    output price."""
    prompt = tokens_of(len(body) + history_bytes)
    return (prompt * INPUT_PRICE + output_cap * OUTPUT_PRICE) * NANOS_PER_MICRO


def cost_nanos(usage: dict[str, Any]) -> int:
    """The cost of a usage at the configured price (no cached tokens in these answers)."""
    micro = usage["prompt_tokens"] * INPUT_PRICE + usage["completion_tokens"] * OUTPUT_PRICE
    return int(micro * NANOS_PER_MICRO)


def usd(nanos: int) -> float:
    return nanos / 1e9


# --- the gateways ----------------------------------------------------------------------------


def config(store_url: str, up: Upstreams, extra_server: str = "") -> str:
    price = f"{{input_per_mtok: {INPUT_PRICE}, output_per_mtok: {OUTPUT_PRICE}}}"
    return f"""
auth: {{master_key: {MASTER}}}
server: {{shutdown_grace_s: 2, client_header_timeout_s: {HEADER_TIMEOUT_S}{extra_server}}}
store: {{url: "{store_url}"}}
routing: {{cooldown_s: 0.001, auth_hold_s: 0.001, circuit_failures: 1000}}
providers:
  - {{name: up, kind: openai, base_url: "{up.openai.base_url}", keys: [{{key: sk-up-1}}]}}
  - {{name: claude, kind: anthropic, base_url: "{up.anthropic.base_url}", keys: [{{key: sk-an-1}}]}}
  - {{name: emb, kind: openai, base_url: "{up.embeddings.base_url}/v1", keys: [{{key: sk-emb-1}}]}}
  - {{name: gem, kind: gemini, base_url: "{up.gemini.base_url}", keys: [{{key: AIza-gem-1}}]}}
  - {{name: gemstore, kind: gemini, base_url: "{up.gemini.base_url}", keys: [{{key: AIza-gem-1}}],
      allow_storage_uris: true}}
models:
  - {{name: priced, targets: [{{provider: up, model: text}}], price: {price}}}
  - {{name: held, targets: [{{provider: up, model: hold}}], price: {price}}}
  - {{name: claude-priced, targets: [{{provider: claude, model: text}}], price: {price}}}
"""


@dataclass
class Store:
    """The gateways of one store, and what a test needs to drive them."""

    name: str
    gateways: list[Gateway]
    up: Upstreams

    def __post_init__(self) -> None:
        self.http = httpx.Client(timeout=30)
        self._turn = itertools.count()

    @property
    def urls(self) -> list[str]:
        return [g.url for g in self.gateways]

    def next_url(self) -> str:
        """The gateways in turn: each request goes to the next process."""
        return self.urls[next(self._turn) % len(self.urls)]

    def post(
        self,
        path: str,
        body: bytes | dict[str, Any],
        key: str,
        headers: dict[str, str] | None = None,
        url: str | None = None,
    ) -> httpx.Response:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        return self.http.post(
            (url or self.next_url()) + path, content=data, headers={**sent, **(headers or {})}
        )

    def new_key(self, **spec: Any) -> dict[str, Any]:
        r = self.post("/admin/keys", {"name": "tenant", **spec}, MASTER)
        assert r.status_code == 201, r.text
        created: dict[str, Any] = r.json()
        return created

    def key_view(self, key_id: str) -> dict[str, Any]:
        r = self.http.get(
            self.next_url() + f"/admin/keys/{key_id}", headers={"Authorization": f"Bearer {MASTER}"}
        )
        assert r.status_code == 200, r.text
        view: dict[str, Any] = r.json()
        return view

    def close(self) -> None:
        self.http.close()


def concurrently(count: int, call: Callable[[int], T]) -> list[T]:
    """`call(0) ... call(count - 1)` on `count` threads at once, results in order."""
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(call, range(count)))


@contextmanager
def store_gateways(name: str, tmp: Path, up: Upstreams) -> Iterator[Store]:
    """memory: one process; sqlite-workers: one process with two workers on one port;
    redis-processes: two processes on different ports sharing one redis-server."""
    started: list[Gateway] = []
    redis: RedisServer | None = None
    try:
        if name == "memory":
            started.append(start_gateway(config("memory://", up), _folder(tmp, "memory")))
        elif name == "sqlite-workers":
            url = f"sqlite:///{tmp}/hostile.db"
            started.append(
                start_gateway(config(url, up), _folder(tmp, "sqlite"), ["--workers", "2"])
            )
        elif name == "redis-processes":
            redis = RedisServer().start()
            for i in range(2):  # one by one: a failed start stops those already started
                started.append(  # noqa: PERF401
                    start_gateway(config(redis.url(), up), _folder(tmp, f"redis-{i}"))
                )
        else:
            raise ValueError(name)
        store = Store(name, started, up)
        try:
            yield store
        finally:
            store.close()
    finally:
        for gateway in started:
            stop_gateway(gateway)
        if redis is not None:
            redis.close()


def _folder(tmp: Path, name: str) -> Path:
    folder = tmp / name
    folder.mkdir()
    return folder


# --- a slowloris client ----------------------------------------------------------------------


@dataclass
class Trickle:
    seconds: float  # from connecting until the gateway closed (or the trickle ended)
    closed: bool
    status: int | None  # the status of an answer, when one came
    sent: int  # header bytes trickled


def trickle(url: str, every_s: float = 0.25, most_bytes: int = 40) -> Trickle:
    """A request line, then a header one byte every `every_s`, for at most `most_bytes`
    bytes: until the gateway answers or closes the connection."""
    host, port = url.removeprefix("http://").split(":")
    started = time.monotonic()
    got = b""
    sent = 0
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        header = b"X-Trickle: " + b"a" * most_bytes
        closed = False
        while sent < most_bytes and not closed:
            readable, _, _ = select.select([sock], [], [], every_s)
            if readable:
                received = bytearray()
                closed = _drain(sock, received)
                got += bytes(received)
                continue
            try:
                sock.sendall(header[sent : sent + 1])
                sent += 1
            except OSError:  # reset or broken pipe: closed by the gateway
                closed = True
        seconds = time.monotonic() - started
    status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.") else None
    return Trickle(seconds, closed, status, sent)


def _drain(sock: socket.socket, into: bytearray) -> bool:
    """Read what is there (up to the end of the connection, waiting at most 1 s for more);
    whether the connection ended."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except OSError:
            return True
        if not chunk:
            return True
        into += chunk
        readable, _, _ = select.select([sock], [], [], 0.2)
        if not readable:
            return False
    return False


# --- the figures -----------------------------------------------------------------------------


@dataclass
class Figure:
    store: str
    exploit: str
    sent: int
    served: int
    budget_nanos: int | None = None
    spend_nanos: int | None = None
    reserve_nanos: int | None = None

    def line(self) -> str:
        text = f"hostile {self.store} {self.exploit}: sent={self.sent} served={self.served}"
        if self.spend_nanos is not None:
            text += f" settled={usd(self.spend_nanos):.9f}"
        if self.budget_nanos is not None and self.spend_nanos is not None:
            overshoot = max(self.spend_nanos - self.budget_nanos, 0)
            text += f" budget={usd(self.budget_nanos):.9f} overshoot={usd(overshoot):.9f}"
        if self.reserve_nanos is not None:
            text += f" reservation={usd(self.reserve_nanos):.9f}"
        return text


FIGURES: list[Figure] = []


def report(figure: Figure) -> Figure:
    FIGURES.append(figure)
    print(figure.line())
    return figure


def table() -> str:
    """The figures as a markdown table (for docs/reliability.md)."""
    rows = [
        "| store | exploit | requests sent | served | settled spend | budget | overshoot |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in FIGURES:
        money = ["", "", ""]
        if f.spend_nanos is not None:
            money[0] = f"{usd(f.spend_nanos):.6f}"
        if f.budget_nanos is not None and f.spend_nanos is not None:
            money[1] = f"{usd(f.budget_nanos):.6f}"
            money[2] = f"{usd(max(f.spend_nanos - f.budget_nanos, 0)):.6f}"
        rows.append(
            f"| {f.store} | {f.exploit} | {f.sent} | {f.served} | " + " | ".join(money) + " |"
        )
    return "\n".join(rows)
