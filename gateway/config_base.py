"""The parts of the config every provider kind's own config is made of: `Secret`, the
provider key, the timeouts, and `ProviderBase`, the tagged Struct each kind extends.

A provider kind declares its config in its own package (gateway/providers/<kind>/config.py)
as a subclass of `ProviderBase` tagged with the kind's name; `gateway.config` decodes the
`providers` list as the union of those (msgspec picks the class from `kind`). So the fields a
kind requires are required fields of its class, the fields it alone takes exist only on its
class (anywhere else they are an unknown field), and its other rules are its `problems()`.
This module imports nothing from the rest of the gateway but `config_parse`'s path types.

A provider's egress (`proxy`, `tls`: docs/egress.md) is one hashable `Egress` value, so the
upstream pool can keep the connections of two providers that reach out differently apart.
"""

from __future__ import annotations

import base64
import hmac
import os
import ssl
from collections.abc import Iterator
from collections.abc import Mapping
from typing import ClassVar
from urllib.parse import SplitResult
from urllib.parse import unquote
from urllib.parse import urlsplit

import msgspec

from gateway.config_parse import Path
from gateway.config_parse import Problem


class Secret:
    """A credential whose repr and str hide it; `.reveal()` is the only way to read it.

    Compares (in constant time) and hashes on the value, is truthy when non-empty, and is
    never quoted in an error message.
    """

    __slots__ = ("_value",)
    _value: str

    def __init__(self, value: str) -> None:
        object.__setattr__(self, "_value", value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Secret is immutable")

    def reveal(self) -> str:
        """The secret value itself: only for the one place that sends it upstream."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))


class ProviderKey(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One credential of a provider; a provider's keys are balanced by weight. A kind with
    other credential forms extends it (Bedrock's SigV4 pair, Vertex's credentials file)."""

    key: Secret | None = None
    name: str | None = None  # shown by /admin/health and in logs instead of a fingerprint
    weight: int = 1
    rpm: int | None = None
    tpm: int | None = None

    def secrets(self) -> list[Secret]:
        """Every secret this key holds: what logs and error messages must never show."""
        return [s for s in (self.key,) if s]

    def identity(self) -> str:
        """What names this key (hashed into its fingerprint): its main credential."""
        return self.key.reveal() if self.key else ""


class Timeouts(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The named timeouts of one upstream attempt, in seconds."""

    connect_s: float = 5.0
    first_byte_s: float = 60.0
    idle_s: float = 60.0  # longest silence between two upstream bytes
    total_s: float = 600.0


class TlsFiles(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A provider's own TLS trust: a private CA (instead of the default trust) and a client
    certificate for mutual TLS. PEM files, read when the config is loaded."""

    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None  # None: the key is in client_cert_file

    def problems(self) -> Iterator[Problem]:
        """What is wrong with the files, as (field, message): each is loaded as the upstream
        client will load it, so a config that passes can connect."""
        unreadable = False
        for field in ("ca_file", "client_cert_file", "client_key_file"):
            path = getattr(self, field)
            if path is not None and not _readable(path):
                unreadable = True
                yield (field,), f"cannot read {path!r} (missing, not a file, or not readable)"
        if unreadable:
            return
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.ca_file)
            except ssl.SSLError as exc:
                yield ("ca_file",), f"no PEM CA certificate in {self.ca_file!r}: {ssl_text(exc)}"
        if self.client_key_file is not None and self.client_cert_file is None:
            yield ("client_cert_file",), "required with client_key_file"
        elif self.client_cert_file is not None:
            try:
                load_client_cert(context, self)
            except ssl.SSLError as exc:
                yield (
                    ("client_key_file",) if self.client_key_file else ("client_cert_file",),
                    "cannot load the client certificate and its key "
                    f"(PEM, matching, unencrypted): {ssl_text(exc)}",
                )


def ssl_text(exc: ssl.SSLError) -> str:
    """What an SSL error says, in one short line (OpenSSL's reason when it gives one)."""
    reason = getattr(exc, "reason", None)
    if reason:
        return str(reason)
    return str(exc.args[-1]) if exc.args else str(exc)


def _readable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.R_OK)


def load_client_cert(context: ssl.SSLContext, tls: TlsFiles) -> None:
    """Loads `tls`'s client certificate into `context`. An encrypted key is refused instead
    of OpenSSL asking for its passphrase on the terminal."""
    if tls.client_cert_file is not None:
        context.load_cert_chain(tls.client_cert_file, tls.client_key_file, password=_no_password)


def _no_password() -> bytes:
    raise ssl.SSLError("the key is encrypted; give it unencrypted (no passphrase is asked)")


def split_proxy_url(url: str) -> SplitResult:
    """A proxy URL `http://[user:pass@]host[:port]` split (no scheme: http, as curl reads
    it). Raises ValueError with a message that quotes no part of the URL's userinfo."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        _ = parts.port  # raises for a port that is not a number in range
    except ValueError:
        raise ValueError("is not a valid proxy URL (http://[user:pass@]host:port)") from None
    scheme = parts.scheme.lower()
    if scheme != "http":
        raise ValueError(
            f"uses scheme {scheme}://; only http:// proxies are supported (CONNECT for https)"
        )
    if not parts.hostname:
        raise ValueError("has no host (http://[user:pass@]host:port)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("must be http://[user:pass@]host:port, without a path or query")
    return parts


def proxy_authorization(parts: SplitResult) -> str | None:
    """The Basic `Proxy-Authorization` value of a proxy URL's userinfo (percent-decoded)."""
    if parts.username is None and parts.password is None:
        return None
    userinfo = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(userinfo.encode()).decode("ascii")


def proxy_secrets(url: str | None) -> list[Secret]:
    """The secrets a proxy URL holds as they may appear in text: its password raw and
    percent-decoded, and the Basic credentials made of them."""
    try:
        parts = split_proxy_url(url) if url else None
    except ValueError:
        # not a URL we would use; its password (if one can be read) still counts
        parts = urlsplit(url if url and "://" in url else f"http://{url}")
    if parts is None or not parts.password:
        return []
    found = [parts.password, unquote(parts.password)]
    authorization = proxy_authorization(parts)
    if authorization:
        found.append(authorization.removeprefix("Basic "))
    return [Secret(s) for s in dict.fromkeys(found)]


# the environment's proxy variables (upstream/egress.py reads them as curl does)
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy")


def env_proxy_secrets(env: Mapping[str, str]) -> list[Secret]:
    """The secrets of the proxies the environment names: redacted like configured ones."""
    found: list[Secret] = []
    for name in PROXY_VARIABLES:
        found += proxy_secrets(env.get(name))
    return found


class Egress(msgspec.Struct, frozen=True):
    """How a provider reaches its upstream: its `proxy` setting (None: the environment's,
    "none": direct) and its own TLS trust (None: the default). Hashable: part of the key
    of a pooled connection."""

    proxy: str | None = None
    tls: TlsFiles | None = None


class ProviderBase(
    msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True, tag_field="kind"
):
    """An upstream: where it is and its keys. Each kind subclasses it with `tag=<kind>`."""

    # What the kind is and what it offers the config (set by each subclass)
    kind: ClassVar[str]
    keyless: ClassVar[bool] = False  # True: keys are optional (a self-hosted server)
    apis: ClassVar[frozenset[str]] = frozenset({"chat"})  # a target's `api` values
    env_key: ClassVar[str | None] = None  # served by the built-in default when this is set
    default_model: ClassVar[str | None] = None  # a model the built-in default serves
    default_url: ClassVar[str | None] = None  # where the kind's SDK goes without `base_url`

    name: str
    base_url: str | None = None
    keys: list[ProviderKey] = []
    timeouts: Timeouts = Timeouts()
    # client image/file URLs other than http(s) and data: (gs://, s3://...) are read with the
    # gateway's cloud identity: refused unless the operator allows them for this provider
    allow_storage_uris: bool = False
    # http://[user:pass@]host:port (credentials are secrets), "none": direct; unset: the
    # environment's https_proxy/http_proxy and no_proxy (docs/egress.md)
    proxy: str | None = None
    tls: TlsFiles | None = None  # a private CA, a client certificate (mutual TLS)

    @property
    def egress(self) -> Egress | None:
        """The provider's egress profile; None when it sets neither `proxy` nor `tls`."""
        if self.proxy is None and self.tls is None:
            return None
        return Egress(proxy=self.proxy, tls=self.tls)

    def secrets(self) -> list[Secret]:
        """Every secret of the provider: its keys' and its proxy's credentials."""
        found = proxy_secrets(self.proxy)
        for key in self.keys:
            found += key.secrets()
        return found

    def default_base_url(self) -> str:
        """Where the kind's SDK sends requests when no `base_url` is set (`default_url`, or
        a kind's own method where it depends on its fields)."""
        if self.default_url is None:
            raise ValueError(f"provider {self.name!r}: kind {self.kind} needs a base_url")
        return self.default_url

    def problems(self) -> Iterator[Problem]:
        """The kind's own rules beyond its types, as (path under this provider, message)."""
        if not self.keys and not self.keyless:
            yield ("keys",), f"kind '{self.kind}' needs at least one key"
        for j, key in enumerate(self.keys):
            yield from self.key_problems(key, ("keys", j))

    def key_problems(self, key: ProviderKey, here: Path) -> Iterator[Problem]:
        """One key's credential rules: by default an api key, required unless keyless."""
        if self.keyless:
            return
        if key.key is None:
            yield (*here, "key"), f"required for kind '{self.kind}'"
        elif not key.key:
            yield (*here, "key"), "must not be empty"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProviderBase | None:
        """The provider the built-in default config adds for this kind, if any: one named
        after the kind when `env_key` is set in the environment, or always when the kind
        has a `default_model` and needs no key."""
        if cls.env_key is not None:
            value = env.get(cls.env_key)
            return cls(name=cls.kind, keys=[ProviderKey(key=Secret(value))]) if value else None
        if cls.default_model is not None and cls.keyless:
            return cls(name=cls.kind)
        return None


def effective_base_url(p: ProviderBase) -> str:
    """The provider's `base_url` without a trailing slash, else its kind's SDK default.
    Raises ValueError for a kind whose default needs a field the provider lacks (a
    validated config has them)."""
    if p.base_url:
        return p.base_url.rstrip("/")
    return p.default_base_url()
