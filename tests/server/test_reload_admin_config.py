"""GET /admin/config: the config in force with every secret as `***`, for the master key
only; the redaction also on its own, over every secret form the config declares."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from gateway.config import parse_config
from gateway.config_base import ProviderBase
from gateway.server.admin_config import redacted
from tests.server.reloading import MASTER
from tests.server.reloading import PICKUP_S
from tests.server.reloading import Served
from tests.server.reloading import admin_config
from tests.server.reloading import call
from tests.server.reloading import launch
from tests.server.reloading import rewrite
from tests.server.reloading import within

OPENAI = "sk-SECRET-openai-a81f"
BEDROCK_KEY = "SECRET-bedrock-api-key-55e0"
AWS_ID = "AKIASECRETID0001"
AWS_SECRET = "SECRET-aws-secret-access-key-9d"
AWS_TOKEN = "SECRET-aws-session-token-771b"
VIRTUAL = "sk-vk-SECRET-tenant-c09e"
STORE_PASSWORD = "SECRET-redis-pw-3e1"
PROXY_PASSWORD = "SECRETproxypw42"
# a provider's `proxy` exists once the egress work is in this build
HAS_PROXY = "proxy" in ProviderBase.__struct_fields__


def secrets_config(store: str = '"memory://"', proxy: bool = HAS_PROXY) -> str:
    proxied = f', proxy: "http://user:{PROXY_PASSWORD}@127.0.0.1:3128"' if proxy else ""
    return f"""
auth: {{master_key: {MASTER}}}
store: {{url: {store}}}
providers:
  - {{name: oa, kind: openai, keys: [{{key: {OPENAI}}}]{proxied}}}
  - name: br
    kind: bedrock
    region: eu-west-1
    keys:
      - {{key: {BEDROCK_KEY}}}
      - {{aws_access_key_id: {AWS_ID}, aws_secret_access_key: {AWS_SECRET},
          aws_session_token: {AWS_TOKEN}}}
models:
  - {{name: m, targets: [{{provider: oa, model: gpt-4.1}}]}}
keys:
  - {{name: tenant, key: {VIRTUAL}}}
"""


ALL = [MASTER, OPENAI, BEDROCK_KEY, AWS_ID, AWS_SECRET, AWS_TOKEN, VIRTUAL, STORE_PASSWORD]


def test_every_secret_form_is_masked() -> None:
    store = f'"redis://default:{STORE_PASSWORD}@127.0.0.1:6379/0"'
    config = parse_config(secrets_config(store), env={})
    shown = json.dumps(redacted(config))
    for secret in [*ALL, PROXY_PASSWORD]:
        assert secret not in shown
    tree = redacted(config)
    assert tree["auth"]["master_key"] == "***"
    assert tree["store"]["url"] == "redis://***@127.0.0.1:6379/0"
    assert tree["providers"][1]["keys"][1]["aws_secret_access_key"] == "***"
    assert tree["keys"][0] == {**tree["keys"][0], "name": "tenant", "key": "***"}
    if HAS_PROXY:
        assert tree["providers"][0]["proxy"] == "http://***@127.0.0.1:3128"


def test_a_secret_in_a_field_that_is_not_one_is_masked_too() -> None:
    text = secrets_config().replace(
        "kind: openai,", f"kind: openai, base_url: 'https://h.example/v1?key={OPENAI}',"
    )
    tree = redacted(parse_config(text, env={}))
    assert tree["providers"][0]["base_url"] == "https://h.example/v1?key=***"
    # an unset master key shows as unset, not as a secret
    open_gateway = parse_config(secrets_config().replace(f"master_key: {MASTER}", ""), env={})
    assert redacted(open_gateway)["auth"]["master_key"] == ""


def test_a_proxy_without_a_scheme_is_masked() -> None:
    if not HAS_PROXY:
        pytest.skip("providers[].proxy is not in this build")
    text = secrets_config(proxy=False).replace(
        "kind: openai,", f"kind: openai, proxy: 'user:{PROXY_PASSWORD}@127.0.0.1:3128',"
    )
    tree = redacted(parse_config(text, env={}))
    assert tree["providers"][0]["proxy"] == "***@127.0.0.1:3128"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Served]:
    path = tmp_path / "gateway.yaml"
    path.write_text(secrets_config())
    served = launch(path)
    yield served
    served.stop()


def test_admin_config_never_shows_a_secret(gateway: Served) -> None:
    before = call(gateway, "GET", "/admin/config")
    assert before[0] == 200
    # after a reload that changes secrets too, and one that fails
    changed = secrets_config().replace(OPENAI, OPENAI + "-rotated")
    rewrite(gateway.path, changed)
    within(PICKUP_S, lambda: admin_config(gateway)["last_reload"] is not None)
    rewrite(gateway.path, changed + f"\nbogus: {VIRTUAL}\n")
    within(PICKUP_S, lambda: admin_config(gateway)["last_reload"]["result"] == "error")
    after = call(gateway, "GET", "/admin/config")
    _, metrics = call(gateway, "GET", "/metrics", key=None)
    everything = before[1] + after[1] + metrics + gateway.log.read_bytes()
    for secret in [*ALL, OPENAI + "-rotated", PROXY_PASSWORD]:
        assert secret.encode() not in everything, secret
    shown = json.loads(after[1])
    assert shown["config"]["providers"][0]["keys"][0]["key"] == "***"
    assert shown["last_reload"]["problems"] == ["bogus: unknown field"]


@pytest.mark.parametrize(
    ("key", "status", "code"),
    [
        (None, 401, "missing_api_key"),
        ("sk-not-a-key", 401, "invalid_api_key"),
        (VIRTUAL, 403, "master_key_required"),
        (MASTER + "x", 401, "invalid_api_key"),
    ],
)
def test_admin_config_is_for_the_master_key_only(
    gateway: Served, key: str | None, status: int, code: str
) -> None:
    got, raw = call(gateway, "GET", "/admin/config", key=key)
    assert got == status
    error = msgspec.json.decode(raw)["error"]
    assert error["code"] == code
    assert b"***" not in raw
    assert OPENAI.encode() not in raw
