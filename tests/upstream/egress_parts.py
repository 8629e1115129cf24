"""The real parts the egress tests run against: a test PKI made with the `openssl` CLI (a CA,
a server certificate for 127.0.0.1/localhost, a client certificate), the fake OpenAI
upstream served over TLS (optionally requiring a client certificate), and Debian's
tinyproxy on a free loopback port with a config and log file of its own."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Self

from aiohttp import web

from tests.upstreams.openai_upstream import FakeOpenAI


class Pki:
    """Files of a throwaway PKI under `folder`: `ca`, `server`, `client` (each .pem and
    .key), and `other_ca.pem`, a CA that signed nothing here."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = folder / "ca.pem"
        self.other_ca = folder / "other_ca.pem"
        self.server_cert, self.server_key = folder / "server.pem", folder / "server.key"
        self.client_cert, self.client_key = folder / "client.pem", folder / "client.key"

    def make(self) -> Self:
        self._ca("ca", "/CN=egress test CA")
        self._ca("other_ca", "/CN=some other CA")
        self._leaf("server", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost")
        self._leaf("client", "/CN=gateway client", "extendedKeyUsage=clientAuth")
        return self

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)

    def _ca(self, name: str, subject: str) -> None:
        self._openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(self.folder / f"{name}.key"),
            "-out", str(self.folder / f"{name}.pem"), "-days", "2", "-subj", subject,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip

    def _leaf(self, name: str, subject: str, extension: str) -> None:
        key, csr = self.folder / f"{name}.key", self.folder / f"{name}.csr"
        extfile = self.folder / f"{name}.ext"
        extfile.write_text(extension + "\n")
        self._openssl(
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject,
        )  # fmt: skip
        self._openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca),
            "-CAkey", str(self.folder / "ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", str(extfile), "-out", str(self.folder / f"{name}.pem"),
        )  # fmt: skip


class TlsOpenAI(FakeOpenAI):
    """The fake OpenAI upstream over TLS with the PKI's server certificate; with
    `client_ca`, a client certificate signed by it is required."""

    name = "fake-openai-tls"

    def __init__(self, pki: Pki, *, require_client_cert: bool = False) -> None:
        super().__init__()
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(pki.server_cert, pki.server_key)
        if require_client_cert:
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(cafile=str(pki.ca))

    @property
    def base_url(self) -> str:
        return f"https://localhost:{self.port}{self.base_path}"

    async def _start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tinyproxy:
    """Debian's tinyproxy in the foreground on 127.0.0.1:`port`, CONNECT allowed to
    `connect_ports` only, Basic auth when `auth` is given; its log is `log_text()`."""

    def __init__(
        self,
        folder: Path,
        connect_ports: list[int],
        auth: tuple[str, str] | None = None,
    ) -> None:
        self.folder = folder
        self.port = free_port()
        self.log = folder / "tinyproxy.log"
        self.config = folder / "tinyproxy.conf"
        lines = [
            f"Port {self.port}",
            "Listen 127.0.0.1",
            "Timeout 30",
            f'LogFile "{self.log}"',
            "LogLevel Info",
            f'PidFile "{folder / "tinyproxy.pid"}"',
            "MaxClients 64",
            "Allow 127.0.0.1",
            *(f"ConnectPort {port}" for port in connect_ports),
        ]
        if auth is not None:
            lines.append(f"BasicAuth {auth[0]} {auth[1]}")
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self.proc = subprocess.Popen(
            ["tinyproxy", "-d", "-c", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tinyproxy exited: {self.log_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("tinyproxy did not listen")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def requests(self) -> list[str]:
        """The request lines tinyproxy logged (`CONNECT host:port HTTP/1.1`, `POST http://...`)."""
        found = []
        for line in self.log_text().splitlines():
            _, marker, request = line.partition("]: Request (file descriptor ")
            if marker:
                found.append(request.split("): ", 1)[1])
        return found
