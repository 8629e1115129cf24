"""Chaos run: a bounded load through a gateway process in front of faulty upstreams
(OpenAI, Anthropic and Bedrock kinds, several keys, three priorities) while failures are
injected at random.

Every request must end as a success (the healthy answer, whole: the text, the exact tool
calls, one finish_reason, `[DONE]`) or as a proper error (an OpenAI-shaped HTTP error, or for
a committed stream an error event followed by `[DONE]`). Anything else is a hang (the
client's own timeout passed) or a corrupted answer, and there must be none of either.

The failures are drawn per request, per attempt, from a seeded RNG and handed to the
upstreams as scripts keyed by the request, so a seed replays the same injections:
`CHAOS_SEED=<seed> pytest tests/e2e/test_chaos.py`. The seed and the counts are printed in
one line and written to `chaos.txt` under the test's tmp dir.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config import RoutingConfig
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.faulty_upstream import CALLS
from tests.upstreams.faulty_upstream import FAILURES
from tests.upstreams.faulty_upstream import TEXT
from tests.upstreams.faulty_upstream import TOOLS
from tests.upstreams.faulty_upstream import FaultyUpstream
from tests.upstreams.faulty_upstream import Scripts

pytestmark = pytest.mark.e2e

REQUESTS = 400
CONCURRENCY = 16
FAIL_P = 0.3  # chance that one upstream answer is a failure (of a kind drawn uniformly)
MAX_ATTEMPTS = 4
# The run leaves routing.retries_per_target at the gateway's default, whichever it is. A
# same-target retry is an attempt on top of the plan's MAX_ATTEMPTS (each target of the plan
# is retried at most that often), so x-gateway-attempts may pass MAX_ATTEMPTS.
RETRIES_PER_TARGET = RoutingConfig().retries_per_target
ATTEMPTS_BOUND = MAX_ATTEMPTS * (1 + RETRIES_PER_TARGET)
DEADLINE_S = 6  # routing.deadline_s: every attempt and retry wait of a request ends by it
TOTAL_S = 2  # one attempt's bound on the fast providers
CLIENT_TIMEOUT_S = 15.0  # far past the gateway's own bound (DEADLINE_S plus one TOTAL_S)
# What the gateway promises (each request ends within DEADLINE_S + TOTAL_S) for the requests
# a worker sends one after another: a slow or busy machine stretches the run (it takes a few
# seconds on an idle one), only a request that outlives the gateway's bound makes it overrun.
RUN_BOUND_S = math.ceil(REQUESTS / CONCURRENCY) * (DEADLINE_S + TOTAL_S)
IDLE_POOL_BOUND = CONCURRENCY * 2  # at most one idle connection per concurrent request and host
SETTLE_S = 10.0  # for closes in flight when the run ends; a socket left past it is leaked
PROPER_ERROR_STATUSES = {429, 502, 503, 504}
TCP_CLOSE_WAIT = "08"
# Bedrock's own faults, met once each after the run; the exception (a throttle, which may rest
# the key) last, and too few failures to open the key's circuit
FRAME_FAULTS = ("bad-crc-first", "bad-crc", "truncated-frame", "exception")


@pytest.fixture(scope="module")
def ups() -> Iterator[list[FaultyUpstream]]:
    scripts = Scripts()  # a request's attempts draw from one script, whichever host they reach
    started = [FaultyUpstream(scripts).start(), FaultyUpstream(scripts).start()]
    yield started
    for up in started:
        up.stop()


def config(east: FaultyUpstream, west: FaultyUpstream) -> str:
    fast = f"{{connect_s: 1, first_byte_s: 0.5, idle_s: 0.5, total_s: {TOTAL_S}}}"

    def provider(name: str, kind: str, url: str, keys: list[int], timeouts: str = fast) -> str:
        listed = ", ".join(f"{{key: sk-{name}-{i}, weight: {w}}}" for i, w in enumerate(keys))
        extra = ""
        if kind == "bedrock":  # SigV4 with dummy credentials, as a real deployment signs
            listed = ", ".join(
                f"{{aws_access_key_id: AKID{name}{i}, aws_secret_access_key: dummy, weight: {w}}}"
                for i, w in enumerate(keys)
            )
            extra = ", region: us-east-1"
        return (
            f"\n  - {{name: {name}, kind: {kind}, base_url: '{url}', keys: [{listed}],"
            f" timeouts: {timeouts}{extra}}}"
        )

    return f"""
server: {{shutdown_grace_s: 5, commit_after_s: 5, keepalive_s: 15}}
# cooldown_s rests a key after a 429 that names no wait, which only Bedrock's throttles do:
# against a load that drains in about a second, a whole second benched br_main for most of it
routing: {{max_attempts: {MAX_ATTEMPTS}, deadline_s: {DEADLINE_S}, cooldown_s: 0.25}}
store: {{url: "memory://"}}
providers:{provider("oa_east", "openai", east.openai_url, [3, 1, 1])}\
{provider("oa_west", "openai", west.openai_url, [1, 1])}\
{provider("an_main", "anthropic", east.anthropic_url, [2, 1])}\
{provider("an_back", "anthropic", west.anthropic_url, [1])}\
{provider("br_main", "bedrock", west.bedrock_url, [2, 1, 1, 1])}\
{provider("br_frames", "bedrock", west.bedrock_url, [1])}\
{provider("canary", "openai", east.openai_url, [1], "{first_byte_s: 5, idle_s: 5}")}
models:
  - name: chaos-a
    targets:
      - {{provider: oa_east, model: ok, priority: 0}}
      - {{provider: an_main, model: ok, priority: 0}}
      - {{provider: br_main, model: ok, priority: 0}}
      - {{provider: oa_west, model: ok, priority: 1}}
      - {{provider: an_back, model: ok, priority: 2}}
  - name: chaos-b
    targets:
      - {{provider: an_main, model: ok, priority: 0, weight: 1}}
      - {{provider: oa_west, model: ok, priority: 0, weight: 2}}
      - {{provider: br_main, model: ok, priority: 0, weight: 1}}
      - {{provider: oa_east, model: ok, priority: 1}}
  # Bedrock first: the other models' (score-ordered) plans seldom start there, and its own
  # faults (bad CRC, a frame cut short, exception frames) must be met often
  - name: chaos-c
    targets:
      - {{provider: br_main, model: ok, priority: 0}}
      - {{provider: an_back, model: ok, priority: 1}}
      - {{provider: oa_east, model: ok, priority: 2}}
  - name: frames
    targets: [{{provider: br_frames, model: ok}}]
  - name: canary
    targets: [{{provider: canary, model: ok}}]
"""


@pytest.fixture(scope="module")
def gw(ups: list[FaultyUpstream], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start_gateway(config(*ups), tmp_path_factory.mktemp("gw-chaos"))
    yield gateway
    stop_gateway(gateway)


@dataclass(frozen=True)
class Spec:
    """One request of the run and the failures its upstream attempts will meet."""

    tag: str
    model: str
    stream: bool
    tools: bool
    modes: tuple[str, ...]


def draw(rng: random.Random) -> list[Spec]:
    specs = []
    for n in range(REQUESTS):
        # one mode for every attempt the gateway may make (it resends nothing unseen)
        modes = tuple(
            rng.choice(FAILURES) if rng.random() < FAIL_P else "ok" for _ in range(ATTEMPTS_BOUND)
        )
        # A rest short against the run's few seconds: refusals are instant, so while keys
        # rest the load drains into 429s, pushing the rest onto fewer keys; with 200 ms a
        # cascade can bench every key and turn most of the run into (proper) 429s.
        modes = tuple(m.replace("rate-limit", "rate-limit-50ms") for m in modes)
        model = rng.choice(["chaos-a", "chaos-b", "chaos-c"])
        specs.append(Spec(f"c{n}", model, stream=rng.random() < 0.5, tools=n % 2 == 0, modes=modes))
    return specs


# --- what a proper answer is ---------------------------------------------------------------


class Corrupted(Exception):
    """The answer is neither the healthy answer nor a proper error."""


def check(cond: bool, why: str) -> None:
    if not cond:
        raise Corrupted(why)


def check_error_object(error: Any) -> None:
    check(isinstance(error, dict), f"error is not an object: {error!r}")
    check(set(error) == {"message", "type", "param", "code"}, f"error shape: {error!r}")
    check(isinstance(error["message"], str) and bool(error["message"]), "empty error message")


def expected_calls(spec: Spec) -> list[tuple[str, Any]]:
    return list(CALLS) if spec.tools else []


def check_message(spec: Spec, body: bytes) -> None:
    completion = json.loads(body)
    check(completion.get("object") == "chat.completion", f"not a completion: {body[:200]!r}")
    choices = completion["choices"]
    check(len(choices) == 1, "choices")
    message = choices[0]["message"]
    check(message.get("content") == TEXT, f"content {message.get('content')!r}")
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]
    check(calls == expected_calls(spec), f"tool calls {calls!r}")
    finish = "tool_calls" if spec.tools else "stop"
    check(choices[0]["finish_reason"] == finish, f"finish {choices[0]['finish_reason']!r}")


def sse_payloads(body: bytes) -> list[bytes]:
    out = []
    for frame in body.split(b"\n\n"):
        lines = [ln for ln in frame.split(b"\n") if ln and not ln.startswith(b":")]
        if lines:
            check(all(ln.startswith(b"data: ") for ln in lines), f"not a data frame: {frame!r}")
            out.append(b"\n".join(ln.removeprefix(b"data: ") for ln in lines))
    return out


def check_stream(spec: Spec, body: bytes) -> str:
    """'success' or 'error' for a 200 stream; raises Corrupted for anything else."""
    payloads = sse_payloads(body)
    check(bool(payloads) and payloads[-1] == b"[DONE]", "the stream does not end with [DONE]")
    check(payloads.count(b"[DONE]") == 1, "[DONE] more than once")
    events = [json.loads(p) for p in payloads[:-1]]
    errors = [i for i, e in enumerate(events) if "error" in e]
    check(errors in ([], [len(events) - 1]), "an error event that is not the last event")
    text, finishes = "", []
    calls: dict[int, list[str]] = {}
    for event in events[: len(events) - len(errors)]:
        check(event.get("object") == "chat.completion.chunk", f"not a chunk: {event!r}")
        for choice in event["choices"]:
            check(choice["index"] == 0, "a second choice")
            delta = choice["delta"]
            text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call["index"], ["", ""])
                slot[0] += call.get("function", {}).get("name") or ""
                slot[1] += call.get("function", {}).get("arguments") or ""
            if choice.get("finish_reason") is not None:
                finishes.append(choice["finish_reason"])
    if errors:
        check_error_object(events[-1]["error"])
        check(TEXT.startswith(text), f"text before the error is not the answer's: {text!r}")
        check(not finishes, "a finish_reason, then an error")
        return "error"
    parsed = [(name, json.loads(args)) for _, (name, args) in sorted(calls.items())]
    check(text == TEXT, f"text {text!r}")
    check(parsed == expected_calls(spec), f"tool calls {parsed!r}")
    check(finishes == ["tool_calls" if spec.tools else "stop"], f"finish reasons {finishes}")
    return "success"


def classify(spec: Spec, status: int, headers: Any, body: bytes) -> str:
    if status != 200:
        check(status in PROPER_ERROR_STATUSES, f"status {status}: {body[:300]!r}")
        parsed = json.loads(body)
        check(set(parsed) == {"error"}, f"error body {body[:300]!r}")
        check_error_object(parsed["error"])
        return "error"
    attempts = int(headers.get("x-gateway-attempts", "0"))
    check(1 <= attempts <= ATTEMPTS_BOUND, f"x-gateway-attempts {attempts}")
    if spec.stream:
        return check_stream(spec, body)
    check_message(spec, body)
    return "success"


# --- the run --------------------------------------------------------------------------------


async def one(session: aiohttp.ClientSession, url: str, spec: Spec) -> tuple[str, str]:
    body: dict[str, Any] = {
        "model": spec.model,
        "messages": [{"role": "user", "content": f"What is the answer? tag:{spec.tag}"}],
        "stream": spec.stream,
    }
    if spec.tools:
        body["tools"] = TOOLS
    try:
        async with asyncio.timeout(CLIENT_TIMEOUT_S):
            async with session.post(url + "/v1/chat/completions", json=body) as response:
                data = await response.read()
                status, headers = response.status, response.headers
    except TimeoutError:
        return "hang", ""
    except aiohttp.ClientError as err:
        return "corrupted", f"{type(err).__name__}: {err}"
    try:
        outcome = classify(spec, status, headers, data)
    except (Corrupted, ValueError, KeyError, TypeError) as err:
        return "corrupted", f"{type(err).__name__}: {err}"
    if outcome == "success":
        return outcome, f"attempts={headers['x-gateway-attempts']}"
    return outcome, "event" if status == 200 else str(status)


@dataclass
class Tally:
    """Outcomes; successes by attempts made and proper errors by kind (HTTP status, or
    `event` in a stream); what went wrong with the rest; the longest a request took; whether
    the run overran its bound."""

    outcomes: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    slowest: float = 0.0
    overran: bool = False


async def run_load(url: str, specs: list[Spec]) -> Tally:
    tally = Tally()
    queue = list(reversed(specs))
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while queue:
                spec = queue.pop()
                started = time.monotonic()
                outcome, why = await one(session, url, spec)
                tally.slowest = max(tally.slowest, time.monotonic() - started)
                tally.outcomes[outcome] += 1
                if outcome in ("success", "error"):
                    tally.kinds[f"{outcome} {why}"] += 1
                else:
                    tally.problems.append(f"{spec}: {outcome} {why}")

        try:
            async with asyncio.timeout(RUN_BOUND_S):
                await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        except TimeoutError:
            tally.overran = True
    return tally


def gateway_sockets(pid: int) -> tuple[int, Counter[str]]:
    """The process's open fd count, and the TCP states of its sockets (by /proc/net/tcp)."""
    inodes = set()
    fds = os.listdir(f"/proc/{pid}/fd")
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed while listing
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    states: Counter[str] = Counter()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                states[fields[3]] += 1
    return len(fds), states


async def settled_sockets(pid: int, fds_before: int) -> tuple[int, Counter[str]]:
    """Give closes in flight up to SETTLE_S before judging the counts."""
    until = time.monotonic() + SETTLE_S
    fds, states = gateway_sockets(pid)
    while fds > fds_before + IDLE_POOL_BOUND or states[TCP_CLOSE_WAIT]:
        if time.monotonic() > until:
            break
        await asyncio.sleep(0.1)
        fds, states = gateway_sockets(pid)
    return fds, states


async def test_chaos_run(
    gw: Gateway,
    ups: list[FaultyUpstream],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 32))
    specs = draw(random.Random(seed))
    for spec in specs:
        ups[0].scripts.set(spec.tag, spec.modes)
    pid = gw.proc.pid
    fds_before, _ = gateway_sockets(pid)

    started = time.monotonic()
    tally = await run_load(gw.url, specs)
    outcomes, kinds, problems = tally.outcomes, tally.kinds, tally.problems
    took = time.monotonic() - started
    fds_after, states = await settled_sockets(pid, fds_before)

    injected = sum((up.injected() for up in ups), Counter())
    by_api = Counter((s.api, "ok" if s.mode == "ok" else "fault") for up in ups for s in up.seen())
    bedrock_streams = [s for up in ups for s in up.seen() if s.api == "bedrock" and s.stream]
    frames_met = sum(1 for s in bedrock_streams if s.mode in FRAME_FAULTS)
    line = (
        f"chaos: requests={sum(outcomes.values())} successes={outcomes['success']} "
        f"errors={outcomes['error']} hangs={outcomes['hang']} "
        f"corrupted={outcomes['corrupted']} seed={seed}"
    )
    detail = (
        f"took={took:.1f}s slowest={tally.slowest:.1f}s outcomes: {dict(sorted(kinds.items()))}"
        f" upstream answers: {dict(sorted(injected.items()))}"
        f" by api: {dict(sorted(by_api.items()))} bedrock stream frame faults: {frames_met}"
        f" gateway fds: {fds_before} before, {fds_after} after"
    )
    (tmp_path / "chaos.txt").write_text(line + "\n" + detail + "\n" + "\n".join(problems))
    with capsys.disabled():
        print(f"\n{line}\n{detail}")

    assert not tally.overran, f"the run took over {RUN_BOUND_S}s: {line}"
    assert sum(outcomes.values()) == REQUESTS, line
    assert outcomes["hang"] == 0, f"{line}\n" + "\n".join(problems[:10])
    assert outcomes["corrupted"] == 0, f"{line}\n" + "\n".join(problems[:10])
    # Proper errors alone would pass the checks above: many requests must get their answer,
    # some of them only thanks to failover, and failures must really have been injected.
    # (Key health decides how many of the rest are refused outright while keys cool down.)
    assert outcomes["success"] >= REQUESTS // 4, line
    first_try = kinds["success attempts=1"]
    failed_over = sum(n for kind, n in kinds.items() if kind.startswith("success")) - first_try
    assert failed_over > 0, detail
    assert sum(n for mode, n in injected.items() if mode != "ok") >= REQUESTS // 10, detail
    for api in ("openai", "anthropic", "bedrock"):  # every kind answered, and failed
        assert by_api[api, "ok"] > 0, detail
        assert by_api[api, "fault"] > 0, detail

    assert states[TCP_CLOSE_WAIT] == 0, f"sockets the upstream closed, still open: {states}"
    assert fds_after <= fds_before + IDLE_POOL_BOUND, (fds_before, fds_after, states)

    assert gw.proc.poll() is None
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(gw.url + "/healthz") as health:
            assert health.status == 200
        canary = Spec("canary", "canary", True, True, ())
        assert await one(session, gw.url, canary) == ("success", "attempts=1")
        # The run meets Bedrock's frame faults only while some br_main key is not resting
        # after a throttle, so how many (if any) is up to its timing: here each is met for
        # sure, on a key of its own, and answered properly as well.
        for mode in FRAME_FAULTS:
            probe = Spec(f"frames-{mode}", "frames", stream=True, tools=True, modes=(mode,))
            ups[0].scripts.set(probe.tag, probe.modes)
            outcome, why = await one(session, gw.url, probe)
            assert outcome in ("success", "error"), f"{probe}: {outcome} {why}"
            met = [(s.api, s.mode, s.stream) for up in ups for s in up.seen(probe.tag)]
            assert ("bedrock", mode, True) in met, (probe, met)
    assert "Traceback" not in gw.log.read_text()
