"""Key health through a real gateway: cooldowns, auth holds, weighted balancing, shared
cooldowns between two processes, the timeout codes, /admin/health.

The fake upstream counts requests per key (`Authorization`); `sk-rl-<n>` answers 429 with
`Retry-After: <n>`, `sk-bad*` answers 401, any other key is served.
"""

from __future__ import annotations

import json
import math
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_upstream import FakeOpenAI

CHAT: Any = [{"role": "user", "content": "hi"}]
MASTER = "sk-master-routing"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    upstream = FakeOpenAI().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def unreachable() -> Iterator[str]:
    """A listener whose accept queue is full: a connect to it hangs (the SYN is dropped)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    for filler in fillers:
        filler.close()
    listener.close()


def provider(name: str, base_url: str, keys: str, extra: str = "") -> str:
    return f"""
  - name: {name}
    kind: openai
    base_url: {base_url}
    keys: {keys}{extra}"""


@pytest.fixture(scope="module")
def gw(
    fake: FakeOpenAI, unreachable: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    url = fake.base_url
    config = (
        'store: {url: "memory://"}\nrouting: {auth_hold_s: 600}\nproviders:'
        + provider("rl", url, "[{key: sk-rl-2, weight: 9, name: limited}, {key: sk-fine}]")
        + provider("auth", url, "[{key: sk-bad-auth, weight: 9}, {key: sk-auth-ok}]")
        + provider("split", url, "[{key: sk-w3, weight: 3}, {key: sk-w1, weight: 1}]")
        + provider("dead", unreachable, "[{key: sk-dead}]", "\n    timeouts: {connect_s: 0.3}")
        + provider("slow", url, "[{key: sk-slow}]", "\n    timeouts: {total_s: 0.5}")
        + provider("mute", url, "[{key: sk-mute}]", "\n    timeouts: {first_byte_s: 0.3}")
    )
    gateway = start_gateway(config + "\n", tmp_path_factory.mktemp("gw-routing"))
    yield gateway
    stop_gateway(gateway)


def client(gw: Gateway, key: str = "k") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key=key, max_retries=0, timeout=20)


def sent_with(fake: FakeOpenAI, key: str) -> int:
    return sum(1 for r in fake.requests if r.headers.get("Authorization") == f"Bearer {key}")


def ask(c: openai.OpenAI, model: str, times: int) -> None:
    for _ in range(times):
        answer = c.chat.completions.create(model=model, messages=CHAT)
        assert answer.choices[0].message.content == "Hello, world!"


def get(gw: Gateway, path: str, key: str | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(gw.url + path)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def test_a_rate_limited_key_gets_nothing_until_its_retry_after_passed(
    gw: Gateway, fake: FakeOpenAI
) -> None:
    with client(gw) as c:
        ask(c, "rl/text", 1)
        while sent_with(fake, "sk-rl-2") == 0:  # weight 9 of 10: soon
            ask(c, "rl/text", 1)
        hit = time.monotonic()
        ask(c, "rl/text", 30)  # every answer is whole: the other key serves them
        assert time.monotonic() - hit < 1.8, "too slow to prove anything"
        assert sent_with(fake, "sk-rl-2") == 1
        time.sleep(max(0.0, hit + 2.2 - time.monotonic()))
        ask(c, "rl/text", 10)
    assert sent_with(fake, "sk-rl-2") == 2  # back in rotation, and cooling down again


def test_a_rejected_key_is_out_of_rotation_with_one_loud_line(
    gw: Gateway, fake: FakeOpenAI
) -> None:
    with client(gw) as c:
        while sent_with(fake, "sk-bad-auth") == 0:
            ask(c, "auth/text", 1)
        ask(c, "auth/text", 30)
    assert sent_with(fake, "sk-bad-auth") == 1
    log = gw.log.read_text()
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1
    assert "rejected the credentials" in errors[0]
    assert "'auth'" in errors[0]
    assert "sk-bad" not in log


def test_weighted_balancing_follows_the_weights(gw: Gateway, fake: FakeOpenAI) -> None:
    n, p = 300, 0.75
    before = sent_with(fake, "sk-w3")
    with client(gw) as c:
        ask(c, "split/text", n)
    share = (sent_with(fake, "sk-w3") - before) / n
    # four standard deviations of a binomial share: fails once in ~16,000 runs
    assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize(
    ("model", "stream", "code"),
    [
        ("dead/text", False, "connect_timeout"),
        ("dead/text", True, "connect_timeout"),
        ("slow/silent", False, "upstream_timeout"),
        ("slow/silent", True, "upstream_timeout"),
        ("mute/silent", True, "first_byte_timeout"),
    ],
)
def test_timeouts_have_their_own_codes(gw: Gateway, model: str, stream: bool, code: str) -> None:
    with client(gw) as c, pytest.raises(openai.APIStatusError) as info:
        c.chat.completions.create(model=model, messages=CHAT, stream=stream)  # type: ignore[call-overload]
    assert info.value.status_code == 504
    body: Any = info.value.body
    assert body["code"] == code


def test_admin_health_is_closed_without_a_master_key(gw: Gateway) -> None:
    status, body = get(gw, "/admin/health", None)
    assert status == 403
    assert body["error"]["code"] == "admin_disabled"


# --- two processes, one sqlite file ------------------------------------------------------------


def shared_config(fake: FakeOpenAI, db: Path) -> str:
    return (
        f'auth: {{master_key: "{MASTER}"}}\nstore: {{url: "sqlite:///{db}"}}\nproviders:'
        + provider("rl", fake.base_url, "[{key: sk-rl-5, weight: 9, name: limited}, {key: sk-ok}]")
        + "\nmodels:\n  - name: smart\n    targets: [{provider: rl, model: text}]\n"
    )


def test_a_cooldown_seen_by_one_process_keeps_the_other_away(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    config = shared_config(fake, tmp_path / "shared.db")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = start_gateway(config, tmp_path / "a")
    second = start_gateway(config, tmp_path / "b")
    try:
        with client(first, MASTER) as c:
            while sent_with(fake, "sk-rl-5") == 0:
                ask(c, "smart", 1)
        hit = time.monotonic()
        time.sleep(1.0)  # the other process reads the store every 0.5 s
        with client(second, MASTER) as c:
            ask(c, "smart", 20)
        assert time.monotonic() - hit < 4.5, "too slow to prove anything"
        assert sent_with(fake, "sk-rl-5") == 1

        status, report = get(second, "/admin/health", MASTER)
        assert status == 200
        (model,) = report["models"]
        assert model["name"] == "smart"
        target = model["targets"][0]
        detail = {d["key"]: d for d in target.pop("keys_detail")}
        # the hold the first process wrote, seen by the second: why it skips the key
        (why,) = detail["limited"]["why"]
        assert (detail["limited"]["usable"], why["reason"]) == (False, "rate_limited")
        assert why["until"] > time.time()
        assert [d["usable"] for k, d in detail.items() if k != "limited"] == [True]
        assert target == {
            "provider": "rl",
            "model": "text",
            "priority": 0,
            "weight": 1,
            "healthy_keys": 1,
            "keys": 2,
        }
        (rl,) = report["providers"]
        limited, ok = rl["keys"]
        assert limited["key"] == "limited"
        assert limited["state"] == "cooldown"
        assert set(limited["cooldowns"]) == {"text"}
        assert limited["cooldowns"]["text"] > time.time()
        assert ok["state"] == "healthy"
        assert len(ok["key"]) == 8
        assert ok["rpm"]["used"] >= 20
        assert ok["in_flight"] == 0
        assert ok["ewma_ttft_s"] > 0
        assert "sk-" not in json.dumps(report)
        status, _ = get(second, "/admin/health", None)
        assert status == 401
    finally:
        stop_gateway(first)
        stop_gateway(second)
