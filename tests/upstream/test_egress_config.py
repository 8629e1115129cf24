"""`providers[].proxy` and `providers[].tls` at config load: a bad value is refused with the
field named (and a proxy's credentials never quoted); the files are loaded as the client
will load them; a provider's proxy credentials are among its secrets."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gateway.config import ConfigError
from gateway.config import parse_config
from gateway.config_base import Egress
from gateway.config_base import TlsFiles
from gateway.config_base import env_proxy_secrets
from tests.upstream.egress_parts import Pki

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki")).make()


def config_with(extra: str) -> str:
    return f"""
store: {{url: "memory://"}}
providers:
  - name: up
    kind: openai
    base_url: https://localhost:8443/v1
    keys: [{{key: sk-x}}]
{extra}
"""


def problems(extra: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(config_with(extra), env={})
    return caught.value.problems


def test_valid_proxy_and_tls_make_one_egress_profile(pki: Pki) -> None:
    config = parse_config(
        config_with(
            f"""    proxy: "http://gw:p%40ss@proxy.corp:3128"
    tls: {{ca_file: "{pki.ca}", client_cert_file: "{pki.client_cert}",
           client_key_file: "{pki.client_key}"}}"""
        ),
        env={},
    )
    provider = config.providers[0]
    assert provider.egress == Egress(
        proxy="http://gw:p%40ss@proxy.corp:3128",
        tls=TlsFiles(
            ca_file=str(pki.ca),
            client_cert_file=str(pki.client_cert),
            client_key_file=str(pki.client_key),
        ),
    )
    assert hash(provider.egress) == hash(Egress(proxy=provider.proxy, tls=provider.tls))
    revealed = {s.reveal() for s in provider.secrets()}
    assert {"p%40ss", "p@ss", "sk-x"} <= revealed
    assert parse_config(config_with(""), env={}).providers[0].egress is None
    assert parse_config(config_with("    proxy: none"), env={}).providers[0].proxy == "none"


@pytest.mark.parametrize(
    ("proxy", "message"),
    [
        ("socks5://gw:Hunter2pw@proxy:1080", "uses scheme socks5://; only http:// proxies"),
        ("https://gw:Hunter2pw@proxy:443", "uses scheme https://"),
        ("http://gw:Hunter2pw@proxy:99999", "is not a valid proxy URL"),
        ("http://gw:Hunter2pw@proxy:3128/x", "without a path or query"),
        ("http://gw:Hunter2pw@:3128", "has no host"),
    ],
)
def test_a_bad_proxy_is_refused_without_its_credentials(proxy: str, message: str) -> None:
    found = problems(f'    proxy: "{proxy}"')
    assert len(found) == 1
    assert found[0].startswith("providers[0].proxy: ")
    assert message in found[0]
    assert "Hunter2pw" not in found[0]
    assert "gw" not in found[0].replace("gateway", "")


def test_a_proxy_with_a_line_break_is_refused() -> None:
    # the usual trailing newline of a secret file, and one inside the password
    for proxy in ("http://gw:Hunter2pw@proxy:3128\\n", "http://gw:Hunter2\\npw@proxy:3128"):
        found = problems(f'    proxy: "{proxy}"')
        assert found == ["providers[0].proxy: contains a line break or control character"]


def test_tls_files_that_are_missing_or_not_pem(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    found = problems(f'    tls: {{ca_file: "{missing}", client_cert_file: "{missing}"}}')
    assert [p.split(": ", 1)[0] for p in found] == [
        "providers[0].tls.ca_file",
        "providers[0].tls.client_cert_file",
    ]
    assert "cannot read" in found[0]
    found = problems(f'    tls: {{ca_file: "{garbage}"}}')
    assert found == [
        f"providers[0].tls.ca_file: no PEM CA certificate in '{garbage}': "
        + found[0].rsplit(": ", 1)[1]
    ]
    key = pki.client_key
    found = problems(f'    tls: {{client_cert_file: "{garbage}", client_key_file: "{key}"}}')
    assert len(found) == 1
    assert found[0].startswith("providers[0].tls.client_key_file: cannot load the client")


def test_a_key_without_a_cert_a_mismatch_and_an_encrypted_key(pki: Pki, tmp_path: Path) -> None:
    found = problems(f'    tls: {{client_key_file: "{pki.client_key}"}}')
    assert found == ["providers[0].tls.client_cert_file: required with client_key_file"]
    # the server's key with the client's certificate
    found = problems(
        f'    tls: {{client_cert_file: "{pki.client_cert}", client_key_file: "{pki.server_key}"}}'
    )
    assert len(found) == 1
    assert "providers[0].tls.client_key_file: cannot load the client certificate" in found[0]
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        [
            *("openssl", "pkey", "-in", str(pki.client_key)),
            *("-aes256", "-passout", "pass:pw", "-out", str(encrypted)),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    found = problems(
        f'    tls: {{client_cert_file: "{pki.client_cert}", client_key_file: "{encrypted}"}}'
    )
    assert len(found) == 1
    assert "providers[0].tls.client_key_file" in found[0]


def test_a_cert_file_holding_its_key_is_enough(pki: Pki, tmp_path: Path) -> None:
    both = tmp_path / "both.pem"
    both.write_text(pki.client_cert.read_text() + pki.client_key.read_text())
    config = parse_config(config_with(f'    tls: {{client_cert_file: "{both}"}}'), env={})
    assert config.providers[0].tls == TlsFiles(client_cert_file=str(both))


def test_unknown_tls_fields_are_refused() -> None:
    found = problems("    tls: {ca: x}")
    assert len(found) == 1
    assert "providers[0].tls" in found[0]


def test_the_environments_proxy_passwords_are_secrets_too() -> None:
    env = {
        "https_proxy": "http://a:one%21@p:1",
        "HTTPS_PROXY": "http://b:two@p:1",
        "http_proxy": "http://c:three@p:1",
        "HTTP_PROXY": "http://d:never-read@p:1",
        "no_proxy": "x",
    }
    revealed = {s.reveal() for s in env_proxy_secrets(env)}
    assert {"one%21", "one!", "two", "three"} <= revealed
    assert "never-read" not in revealed
    assert env_proxy_secrets({}) == []
