"""The rig's run: start everything, drive the phases, stop everything, return the figures.

Phases, in order (deploy/README.md, "Local rig", says why each is shaped this way):
1. direct: the steady load against gateway A alone;
2. nginx: the same load through nginx, in front of A and B;
3. limits: under a background load through nginx, the rpm key and the budget key are each
   driven straight at A and B alternately, so only the shared redis store can hold them;
4. prometheus: once both gateways were scraped after phase 3 ended, the chat request counts
   summed over the two targets must equal the client's, by status class. (Before the restart:
   a restarted process starts its counters at 0 and its last requests may miss a scrape.)
5. restart: a load through nginx (a quarter of it streams that take a second) while A, then
   B, is stopped with SIGTERM, drains, is started again and is back in nginx's rotation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.load_wrk import WrkRun, run_wrk, wrk_version
from deploy.rig.client import (
    MAX_TOKENS,
    SCENARIOS,
    STEADY_MIX,
    Kind,
    Load,
    Outcome,
    client_session,
    send,
)
from deploy.rig.processes import Gateway, Nginx, Prometheus, RigError, Upstream, tail
from deploy.rig.report import Limits, PrometheusFigures, Report, Restart, Settings
from tests.redis_server import RedisServer

MAX_BODY_BYTES = 10485760  # as deploy/k8s/base/config.yaml and the Ingress
PRICE = {"input_per_mtok": 10.0, "cached_input_per_mtok": 5.0, "output_per_mtok": 30.0}
CHAT_ROUTE = "/v1/chat/completions"
# A "think" stream's upstream is silent for 1 s after its role chunk; the gateway sends the
# client its headers after this long anyway, so during most of that second the stream is
# committed: bytes have reached the client, and nginx can no longer hand it elsewhere.
COMMIT_AFTER_S = 0.2


@dataclass
class Keys:
    master: str
    budget: str
    rpm: str


def gateway_config(settings: Settings, upstream: Upstream, redis: str, keys: Keys) -> str:
    models = "\n".join(
        f"  - {{name: {name}, targets: [{{provider: up, model: {scenario}}}], price: {price}}}"
        for name, (scenario, _) in SCENARIOS.items()
        for price in [str(PRICE).replace("'", "")]
    )
    return f"""\
server:
  max_body_bytes: {MAX_BODY_BYTES}
  shutdown_grace_s: {settings.shutdown_grace_s}
  commit_after_s: {COMMIT_AFTER_S}
routing: {{deadline_s: 60}}
auth: {{master_key: "{keys.master}"}}
store: {{url: "{redis}"}}
providers:
  - name: up
    kind: openai
    base_url: {upstream.base_url}
    keys: [{{key: sk-rig-upstream}}]
models:
{models}
keys:
  - {{name: rig-budget, key: "{keys.budget}", budget_usd: {settings.budget_usd}}}
  - {{name: rig-rpm, key: "{keys.rpm}", rpm: {settings.rpm}}}
"""


async def run_rig(settings: Settings) -> Report:
    keys = Keys(*(f"sk-rig-{secrets.token_hex(16)}" for _ in range(3)))
    with tempfile.TemporaryDirectory(prefix="gw-rig-") as tmp:
        directory = Path(tmp)
        redis = RedisServer()
        upstream = Upstream(directory)
        config = directory / "gateway.yaml"
        a, b = Gateway("A", config, directory), Gateway("B", config, directory)
        nginx = Nginx((a, b), MAX_BODY_BYTES)
        prometheus = Prometheus((a, b))
        try:
            redis.start()
            upstream.start()
            config.write_text(gateway_config(settings, upstream, redis.url(), keys))
            await asyncio.gather(a.start(), b.start())
            await nginx.start()
            await asyncio.to_thread(prometheus.start)
            return await _phases(settings, keys, a, b, nginx, prometheus)
        finally:
            for stop in (prometheus.close, nginx.close, a.stop, b.stop, upstream.stop):
                stop()
            redis.close()


async def _phases(
    settings: Settings, keys: Keys, a: Gateway, b: Gateway, nginx: Nginx, prometheus: Prometheus
) -> Report:
    c = settings.concurrency
    async with client_session(4 * c + 16) as session:
        steady = (keys.master, STEADY_MIX, c, settings.load_s, settings.max_requests)
        direct = await Load((a.url,), *steady).run(session)
        through = await Load((nginx.url,), *steady).run(session)
        limits = await _limits(settings, keys, a, b, nginx, session)
        scraped_after = time.time() + 0.2  # a counter is bumped right after the last byte
        sent = [*direct.outcomes, *through.outcomes, *limits.all_outcomes()]
        figures = await _prometheus(prometheus, scraped_after, sent)
        wrk = await _wrk(settings, keys.master, a, nginx) if settings.wrk_s else []
        restart_load = Load(
            (nginx.url,), keys.master, settings.restart_mix, c, 300.0, settings.max_requests
        )
        running = asyncio.create_task(restart_load.run(session))
        try:
            restarts = [
                await _restart(settings, gateway, nginx, keys.master, session, restart_load)
                for gateway in (a, b)
            ]
            await asyncio.sleep(1.0)
        finally:
            restart_load.stop.set()
            await running
    for restart in restarts:
        restart.count_in_flight(restart_load.outcomes)
    return Report(settings, direct, through, limits, figures, restart_load, restarts, wrk)


async def _limits(
    settings: Settings, keys: Keys, a: Gateway, b: Gateway, nginx: Nginx, session: Any
) -> Limits:
    background = Load(
        (nginx.url,),
        keys.master,
        STEADY_MIX,
        settings.background_concurrency,
        120.0,
        settings.max_requests,
    )
    running = asyncio.create_task(background.run(session))
    replicas = (a.url, b.url)
    budget_mix = (*STEADY_MIX[:2], Kind("rig-text", False))
    concurrency = settings.limit_concurrency
    try:
        unary_and_stream = (Kind("rig-text", True), Kind("rig-text", False))
        rpm = await Load(
            replicas, keys.rpm, unary_and_stream, concurrency, 60.0, settings.rpm_requests
        ).run(session)
        budget = await Load(
            replicas, keys.budget, budget_mix, concurrency, 60.0, settings.budget_requests
        ).run(session)
        # Then one at a time, none other of the key in flight, until one is refused: which
        # happens only once less than one reservation is left, so the budget was spent (not
        # merely held by reservations of requests in flight).
        tail: list[Outcome] = []
        while len(tail) < settings.budget_requests and (not tail or tail[-1].ok):
            base = replicas[len(tail) % 2]
            tail.append(await send(session, base, keys.budget, Kind("rig-text", True)))
    finally:
        background.stop.set()
        await running
    spend = [await _key(session, gateway, keys.master, "cfg-rig-budget") for gateway in (a, b)]
    reserve = max(_reservation(kind) for kind in budget_mix)
    return Limits(a.url, b.url, background, rpm, budget, tail, spend, reserve)


async def _wrk(settings: Settings, master: str, a: Gateway, nginx: Nginx) -> list[WrkRun]:
    """bench/'s wrk runs (status codes only, no content checks) for an RPS figure that the
    Python client does not cap: each body against gateway A alone, then through nginx."""
    if wrk_version() is None:
        raise RigError("wrk is not installed: run bench/install_deps.sh")
    runs = []
    for kind in (Kind("rig-text", False), Kind("rig-tools", True)):
        body = json.dumps(kind.body()).encode()
        for target, base in (("direct to gateway A", a.url), ("nginx -> A + B", nginx.url)):
            label = f"{target}, {'stream' if kind.stream else 'non-streaming'}"
            url = f"{base}/v1/chat/completions"
            with _environment(BENCH_KEY=master):  # the key wrk_chat.lua sends
                run = await asyncio.to_thread(
                    run_wrk, label, url, body, settings.concurrency, settings.wrk_s, []
                )
            runs.append(run)
    return runs


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _reservation(kind: Kind) -> float:
    """The most a request of `kind` reserves (docs/accounting.md, Budgets): its prompt
    estimate (body bytes / 4, rounded up; the client's JSON is at most this long) at the
    input price plus its max_tokens at the output price."""
    body = len(json.dumps(kind.body()).encode())  # aiohttp's json= is json.dumps
    prompt = -(-body // 4)
    return (prompt * PRICE["input_per_mtok"] + MAX_TOKENS * PRICE["output_per_mtok"]) / 1e6


async def _key(session: Any, gateway: Gateway, master: str, key_id: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {master}"}
    url = f"{gateway.url}/admin/keys/{key_id}"
    async with session.get(url, headers=headers) as answer:
        if answer.status != 200:
            text = await answer.text()
            raise RigError(f"GET {url}: {answer.status} {text}\n{tail(gateway.log, 60)}")
        body: dict[str, Any] = await answer.json()
        return body


async def _prometheus(
    prometheus: Prometheus, scraped_after: float, sent: list[Any]
) -> PrometheusFigures:
    await asyncio.sleep(max(0.0, scraped_after - time.time()))
    await prometheus.wait_scraped_after(scraped_after)
    up = await asyncio.to_thread(prometheus.query, f'up{{job="{prometheus.job}"}}')
    counted = f'gateway_requests_total{{job="{prometheus.job}",route="{CHAT_ROUTE}"}}'
    by_class = await asyncio.to_thread(prometheus.query, f"sum by (status_class) ({counted})")
    by_target = await asyncio.to_thread(prometheus.query, f"sum by (instance) ({counted})")
    client: dict[str, int] = {}
    for outcome in sent:
        status_class = f"{outcome.status // 100}xx" if outcome.status else "no answer"
        client[status_class] = client.get(status_class, 0) + 1
    return PrometheusFigures(
        up={s["metric"]["instance"]: float(s["value"][1]) for s in up},
        gateway_counts={s["metric"]["status_class"]: int(float(s["value"][1])) for s in by_class},
        client_counts=client,
        per_target={s["metric"]["instance"]: int(float(s["value"][1])) for s in by_target},
    )


async def _restart(
    settings: Settings, gateway: Gateway, nginx: Nginx, master: str, session: Any, load: Load
) -> Restart:
    """SIGTERM `gateway` once it is midway through a long stream, watch it drain and exit,
    start it again, and wait until nginx sends it requests again."""
    record = Restart(gateway.name, gateway.address)
    await _midway_through_a_stream(gateway, load)
    connector = aiohttp.TCPConnector(limit=1)  # one kept-alive connection for /readyz
    async with aiohttp.ClientSession(connector=connector) as probe:
        async with probe.get(f"{gateway.url}/readyz") as answer:
            record.readyz_before = answer.status
            await answer.read()
        record.sigterm_at = time.monotonic()
        gateway.terminate()
        # The listener closes at once, but a connection already open still reaches the
        # draining gateway: /readyz there turns 503 once the signal has been handled.
        deadline = time.monotonic() + 2.0
        while record.readyz_draining in (None, 200) and time.monotonic() < deadline:
            try:
                async with probe.get(f"{gateway.url}/readyz") as answer:
                    record.readyz_draining = answer.status
                    record.readyz_body = await answer.text()
            except aiohttp.ClientError as exc:
                record.readyz_body = f"{type(exc).__name__}: {exc}"
                break
            await asyncio.sleep(0.01)
    # the drain's own bounds: the grace, 5 s to end what is left, 5 s to close connections
    record.exit_code = await gateway.wait(settings.shutdown_grace_s + 15)
    record.stuck_log = gateway.stuck_log
    record.drain_s = time.monotonic() - record.sigterm_at
    await gateway.start()
    record.ready_again_s = time.monotonic() - record.sigterm_at
    record.back_in_rotation_s = await _back_in_rotation(gateway, nginx, master, session)
    return record


async def _midway_through_a_stream(gateway: Gateway, load: Load) -> None:
    """Wait (at most 5 s) until `gateway` has been answering a "think" stream for 0.1 to
    0.4 s (committed COMMIT_AFTER_S in, ~1 s long): a SIGTERM then finds a committed stream
    with a good part still to come, rather than, by chance, only streams about to end."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if any(0.1 <= age <= 0.4 for age in load.answering_for("rig-think", gateway.address)):
            return
        await asyncio.sleep(0.01)


async def _back_in_rotation(gateway: Gateway, nginx: Nginx, master: str, session: Any) -> float:
    """Seconds until a request through nginx is answered by `gateway`."""
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {master}"}
    while time.monotonic() - started < 15.0:
        async with session.get(f"{nginx.url}/v1/models", headers=headers) as answer:
            await answer.read()
            if answer.headers.get("X-Rig-Upstream", "").endswith(gateway.address):
                return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise RigError(f"nginx did not send requests to gateway {gateway.name} again in 15 s")
