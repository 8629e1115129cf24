"""Proxy selection (upstream/egress.py): the environment as curl reads it, no_proxy, a
provider's own `proxy`, and proxy URLs parsed without ever quoting their credentials."""

from __future__ import annotations

import base64

import pytest

from gateway.upstream.egress import ProxyEndpoint
from gateway.upstream.egress import bypasses
from gateway.upstream.egress import parse_proxy
from gateway.upstream.egress import proxy_credentials
from gateway.upstream.egress import proxy_for

ENV = {"https_proxy": "http://p.corp:3128", "http_proxy": "http://plain.corp:8080"}


def test_env_proxy_by_scheme() -> None:
    assert proxy_for("https://api.openai.com/v1", None, ENV) == "http://p.corp:3128"
    assert proxy_for("http://ollama:11434/api", None, ENV) == "http://plain.corp:8080"
    assert proxy_for("https://api.openai.com/v1", None, {}) is None


def test_upper_case_https_proxy_is_read_but_never_upper_case_http_proxy() -> None:
    assert proxy_for("https://a.example/", None, {"HTTPS_PROXY": "http://u:1"}) == "http://u:1"
    # lower case wins, as in curl
    both = {"https_proxy": "http://low:1", "HTTPS_PROXY": "http://up:1"}
    assert proxy_for("https://a.example/", None, both) == "http://low:1"
    # httpoxy: a CGI client's `Proxy:` header becomes HTTP_PROXY; it must not steer requests
    assert proxy_for("http://a.example/", None, {"HTTP_PROXY": "http://evil:1"}) is None


def test_empty_values_are_unset_and_scheme_less_proxy_is_http() -> None:
    assert proxy_for("https://a.example/", None, {"https_proxy": " "}) is None
    assert proxy_for("https://a.example/", None, {"https_proxy": "p:3128"}) == "http://p:3128"


def test_provider_proxy_overrides_env_and_none_bypasses() -> None:
    assert proxy_for("https://a.example/", "http://mine:9", ENV) == "http://mine:9"
    assert proxy_for("http://a.example/", "http://mine:9", {}) == "http://mine:9"
    assert proxy_for("https://a.example/", "none", ENV) is None
    assert proxy_for("https://a.example/", "None", ENV) is None


def test_no_proxy_applies_to_env_and_provider_proxies() -> None:
    env = {**ENV, "no_proxy": "internal.corp,169.254.169.254"}
    assert proxy_for("https://api.internal.corp/v1", None, env) is None
    assert proxy_for("http://169.254.169.254/latest/api/token", "http://mine:9", env) is None
    assert proxy_for("https://api.openai.com/", None, env) == "http://p.corp:3128"
    assert proxy_for("https://x.corp/", None, {**ENV, "NO_PROXY": "x.corp"}) is None
    # lower case first
    assert proxy_for("https://x.corp/", None, {**ENV, "no_proxy": "y", "NO_PROXY": "x.corp"})


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "expected"),
    [
        ("example.com", 443, "example.com", True),
        ("api.example.com", 443, "example.com", True),
        ("api.example.com", 443, ".example.com", True),
        ("example.com", 443, ".example.com", True),
        ("badexample.com", 443, "example.com", False),
        ("badexample.com", 443, ".example.com", False),
        ("example.com.", 443, "example.com", True),
        ("Example.COM", 443, "EXAMPLE.com.", True),
        ("example.com", 443, "other.org, example.com", True),
        ("example.com", 443, "other.org example.com", True),
        ("example.com", 443, " , ,", False),
        ("example.com", 443, "", False),
        ("example.com", 443, "*", True),
        ("10.1.2.3", 80, "*", True),
        ("example.com", 443, "other.org,*", True),
        ("example.com", 443, "*.example.com", False),  # not a glob: curl neither
        ("com", 443, "example.com", False),
        # ports narrow an entry to that port
        ("example.com", 8443, "example.com:8443", True),
        ("example.com", 443, "example.com:8443", False),
        # IP literals: exact, CIDR, IPv6 with and without brackets, never by suffix
        ("10.1.2.3", 443, "10.1.2.3", True),
        ("10.1.2.3", 443, "10.1.2.4", False),
        ("10.1.2.3", 443, "10.0.0.0/8", True),
        ("11.1.2.3", 443, "10.0.0.0/8", False),
        ("10.1.2.3", 443, "2.3", False),
        ("10.1.2.3", 443, "10.1.2.3:443", True),
        ("10.1.2.3", 80, "10.1.2.3:443", False),
        ("::1", 443, "::1", True),
        ("[::1]", 443, "[::1]", True),
        ("::1", 8080, "[::1]:8080", True),
        ("::1", 443, "[::1]:8080", False),
        ("fd00::5", 443, "fd00::/8", True),
        ("10.1.2.3", 443, "fd00::/8", False),
        ("127.0.0.1", 443, "localhost", False),  # names are not resolved
        ("example.com", 443, "10.0.0.0/8", False),
        ("example.com", 443, "[garbage", False),
    ],
)
def test_no_proxy_rules(host: str, port: int, no_proxy: str, expected: bool) -> None:
    assert bypasses(host, port, no_proxy) is expected


def test_parse_proxy_credentials_are_percent_decoded_basic() -> None:
    endpoint = parse_proxy("http://us%40er:p%3Ass@proxy.corp:3128")
    assert (endpoint.host, endpoint.port) == ("proxy.corp", 3128)
    assert endpoint.authorization == "Basic " + base64.b64encode(b"us@er:p:ss").decode()
    assert endpoint.label == "proxy.corp:3128"
    assert parse_proxy("proxy.corp") == ProxyEndpoint(host="proxy.corp", port=1080)
    assert parse_proxy("http://[::1]:8888").label == "[::1]:8888"


@pytest.mark.parametrize(
    "url",
    [
        "https://bobby:s3cretPW@proxy:443",
        "socks5://bobby:s3cretPW@proxy:1080",
        "http://bobby:s3cretPW@proxy:3128/path",
        "http://bobby:s3cretPW@proxy:notaport",
        "http://bobby:s3cretPW@:3128",
    ],
)
def test_bad_proxy_urls_are_refused_without_quoting_the_password(url: str) -> None:
    with pytest.raises(ValueError, match=r"proxy|scheme|host:port") as caught:
        parse_proxy(url)
    assert "s3cretPW" not in str(caught.value)
    assert "bobby" not in str(caught.value)


def test_proxy_credentials_lists_every_form_of_the_password() -> None:
    found = proxy_credentials("http://bob:p%25w0rd@proxy:3128")
    assert found == ["p%25w0rd", "p%w0rd", base64.b64encode(b"bob:p%w0rd").decode()]
    assert proxy_credentials("http://proxy:3128") == []
