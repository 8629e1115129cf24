"""Egress: which forward proxy an upstream URL is reached through, and the CONNECT tunnel.

Selection follows curl, so an operator's environment means here what it means to the rest of
their tooling:

- `https_proxy` (then `HTTPS_PROXY`) for https URLs, `http_proxy` for http URLs: lower case
  only, since an `HTTP_PROXY` can be set by a CGI client's `Proxy:` header (httpoxy);
  an empty value is unset; `all_proxy` is not read (it is mostly SOCKS, which is not spoken);
- a provider's `proxy:` setting replaces the environment's for that provider, and
  `proxy: none` reaches it directly;
- `no_proxy` (then `NO_PROXY`) applies to both, as curl applies it to `--proxy` too (a
  provider's proxy must not carry token requests to the metadata server at 169.254.169.254):
  entries split on commas and blanks; `*` matches every host; a name matches itself and its
  subdomains, with or without a leading dot (`example.com` and `.example.com` both match
  `example.com` and `api.example.com`, never `badexample.com`); an IP literal matches that
  address (IPv6 with or without brackets), a CIDR block (`10.0.0.0/8`, `fd00::/8`) the
  addresses in it; `host:port` matches that port only (curl ignores ports; here they narrow).
  Names are compared without case and without a trailing dot; no name is resolved.

A proxy URL is `http://[user:pass@]host[:port]` (a URL without a scheme is taken as http, a
missing port is 1080, both as curl does); its userinfo is percent-decoded into a Basic
`Proxy-Authorization`. The credentials are secrets: `ProxyEndpoint.label` (host:port) is the
only way a proxy is named in a message.

The tunnel (`open_tunnel`): CONNECT host:port in authority form with the credentials, the
answer's head read by a small protocol; a 2xx leaves a raw transport for the pool to start
TLS on (the upstream's SNI and certificate check, inside the tunnel); anything else, or a
proxy that closes or cannot be reached, is an `UpstreamConnectError` of the attempt.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from collections.abc import Mapping
from urllib.parse import urlsplit

import msgspec

from gateway.config_base import proxy_authorization
from gateway.config_base import proxy_secrets
from gateway.config_base import split_proxy_url
from gateway.errors import ProxyRefusedError
from gateway.errors import UpstreamConnectError

DEFAULT_PROXY_PORT = 1080  # curl's default for a proxy URL without a port
BYPASS = "none"  # `providers[].proxy: none`


class ProxyEndpoint(msgspec.Struct, frozen=True):
    """A forward proxy to connect to: where, and the Basic credentials it is sent (if any)."""

    host: str
    port: int
    authorization: str | None = None  # the `Proxy-Authorization` value: a secret

    @property
    def label(self) -> str:
        """host:port, what a message may say of the proxy (never its credentials)."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{shown}:{self.port}"


def parse_proxy(url: str) -> ProxyEndpoint:
    """The endpoint a proxy URL names. Raises ValueError with a message that quotes no part
    of the URL's userinfo."""
    parts = split_proxy_url(url)
    host = parts.hostname or ""
    return ProxyEndpoint(
        host=host,
        port=parts.port or DEFAULT_PROXY_PORT,
        authorization=proxy_authorization(parts),
    )


def proxy_credentials(url: str) -> list[str]:
    """The secrets a proxy URL holds, as they may appear in text: the password raw and
    percent-decoded, and the Basic value made of them (what a log line must never show)."""
    return [secret.reveal() for secret in proxy_secrets(url)]


def _env(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip():
            return value.strip()
    return None


def env_proxy_name(scheme: str, env: Mapping[str, str] | None = None) -> str:
    """The variable the environment's proxy for `scheme` is read from (for messages)."""
    env = os.environ if env is None else env
    if scheme == "https" and _env(env, "https_proxy") is None:
        return "HTTPS_PROXY"
    return f"{scheme}_proxy"


def env_proxy(scheme: str, env: Mapping[str, str] | None = None) -> str | None:
    """The environment's proxy for URLs of `scheme` (None: none is set)."""
    env = os.environ if env is None else env
    if scheme == "https":
        return _env(env, "https_proxy", "HTTPS_PROXY")
    if scheme == "http":
        return _env(env, "http_proxy")  # never HTTP_PROXY: see httpoxy
    return None


def proxy_for(url: str, configured: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The proxy URL (credentials included) to reach `url` through, given a provider's
    `proxy` setting (None: not set, the environment's; "none": direct); None when `url` is
    reached directly, `no_proxy` included."""
    env = os.environ if env is None else env
    if configured is not None and configured.strip().lower() == BYPASS:
        return None
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    proxy = configured.strip() if configured else env_proxy(scheme, env)
    if not proxy:
        return None
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        return proxy  # not ours to judge: the connect step reports the bad URL
    if host is None:
        return proxy
    port = port or (443 if scheme == "https" else 80)
    if bypasses(host, port, _env(env, "no_proxy", "NO_PROXY")):
        return None
    return "http://" + proxy if "://" not in proxy else proxy


def bypasses(host: str, port: int, no_proxy: str | None) -> bool:
    """Whether `no_proxy` (the variable's value) says `host`:`port` is reached directly."""
    if not no_proxy:
        return False
    host = host.strip("[]").rstrip(".").lower()
    address = _address(host)
    for entry in no_proxy.replace(",", " ").split():
        if entry == "*":
            return True
        pattern, entry_port = _split_port(entry.lower())
        if entry_port is not None and entry_port != port:
            continue
        if address is not None:
            if _matches_address(address, pattern):
                return True
            continue
        name = pattern.lstrip(".").rstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def _split_port(entry: str) -> tuple[str, int | None]:
    """An entry's host pattern and the port it names, if any (`[::1]:8080`, `a.b:8080`)."""
    if entry.startswith("["):
        inside, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        return inside, int(port) if port.isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        if port.isdigit():
            return name, int(port)
    return entry, None


def _matches_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address, pattern: str) -> bool:
    try:
        if "/" in pattern:
            return address in ipaddress.ip_network(pattern, strict=False)
        return address == ipaddress.ip_address(pattern)
    except (ValueError, TypeError):
        return False


# --- the CONNECT tunnel --------------------------------------------------------------------

MAX_CONNECT_ANSWER = 16384  # a proxy's answer head larger than this is not one


class _ConnectAnswer(asyncio.Protocol):
    """Reads a proxy's answer to CONNECT: its head, up to the blank line. Nothing follows a
    2xx head until the client's TLS hello, so no byte of the tunnel is read here."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.head: asyncio.Future[bytes] = loop.create_future()
        self._buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        if self.head.done():
            return
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end >= 0:
            self.head.set_result(bytes(self._buffer[:end]))
        elif len(self._buffer) > MAX_CONNECT_ANSWER:
            self.head.set_exception(ConnectionError("an answer head over 16 KiB"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.head.done():
            self.head.set_exception(ConnectionError("the proxy closed the connection"))


def connect_request(proxy: ProxyEndpoint, host: str, port: int) -> bytes:
    """The CONNECT request for `host`:`port` (authority form; IPv6 in brackets)."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}", "User-Agent: gateway/0.1"]
    if proxy.authorization:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


async def open_tunnel(proxy: ProxyEndpoint, host: str, port: int) -> asyncio.Transport:
    """A connection to `proxy` on which it agreed to CONNECT to `host`:`port`: the raw
    tunnel, for the caller to start TLS on. Raises `UpstreamConnectError` naming the proxy
    by host:port only; the caller bounds the time (connect_s)."""
    loop = asyncio.get_running_loop()
    where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    try:
        transport, answer = await loop.create_connection(
            lambda: _ConnectAnswer(loop), proxy.host, proxy.port
        )
    except OSError as exc:
        raise UpstreamConnectError(
            f"cannot connect to proxy {proxy.label} (for {where}): {exc.strerror or exc}"
        ) from None
    try:
        transport.write(connect_request(proxy, host, port))
        head = await answer.head
        status, reason = _status_line(head)
        if not 200 <= status < 300:
            refused = ProxyRefusedError if 400 <= status < 500 else UpstreamConnectError
            raise refused(
                f"proxy {proxy.label} refused CONNECT to {where}: HTTP {status} {reason}".rstrip()
            )
    except ConnectionError as exc:
        transport.abort()
        raise UpstreamConnectError(
            f"proxy {proxy.label} gave no answer to CONNECT to {where}: {exc}"
        ) from None
    except BaseException:
        transport.abort()
        raise
    return transport


def _status_line(head: bytes) -> tuple[int, str]:
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    version, _, rest = line.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not (len(code) == 3 and code.isdigit()):
        raise ConnectionError("not an HTTP answer")
    # the reason is the proxy's text: printable and short in a message
    shown = "".join(c for c in reason if c.isprintable())[:80]
    return int(code), shown
