"""The TLS client contexts upstream connections are made with, one per trust profile.

- No `tls` on the provider: OpenSSL's default trust, which is the system store unless
  `SSL_CERT_FILE` (a PEM bundle) or `SSL_CERT_DIR` (a hashed directory) replace it, as for
  curl and every OpenSSL client.
- `tls.ca_file`: that bundle instead of the default trust (a private CA trusts only
  itself: a provider behind one should not also accept any public certificate for its host).
- `tls.client_cert_file` (+ `client_key_file`): the certificate offered when the upstream
  asks for one (mutual TLS), on top of either trust.

Certificates and host names are always checked (SNI and the check are the upstream's host,
also inside a proxy's CONNECT tunnel). A context is made once per profile and environment
and shared by every connection of the process: loading a CA bundle costs milliseconds and
its memory is per context. The files were checked when the config was loaded
(`TlsFiles.problems`); one that changed since is an upstream connect error here.
"""

from __future__ import annotations

import os
import ssl

from gateway.config_base import TlsFiles
from gateway.config_base import load_client_cert
from gateway.errors import UpstreamConnectError

_MAX_CONTEXTS = 64  # a config has a handful of profiles; the bound only guards a leak
_contexts: dict[tuple[TlsFiles | None, str | None, str | None], ssl.SSLContext] = {}


def client_context(tls: TlsFiles | None) -> ssl.SSLContext:
    """The shared context for `tls` (None: the default trust) under the current
    `SSL_CERT_FILE`/`SSL_CERT_DIR`."""
    key = (tls, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _contexts.get(key)
    if context is None:
        context = _make(tls)
        if len(_contexts) >= _MAX_CONTEXTS:
            _contexts.clear()
        _contexts[key] = context
    return context


def _make(tls: TlsFiles | None) -> ssl.SSLContext:
    if tls is None or tls.ca_file is None:
        context = ssl.create_default_context()
    else:
        try:
            context = ssl.create_default_context(cafile=tls.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamConnectError(f"cannot load tls.ca_file {tls.ca_file!r}: {exc}") from None
    if tls is not None:
        try:
            load_client_cert(context, tls)
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamConnectError(f"cannot load the tls client certificate: {exc}") from None
    return context
