"""A real `redis-server` of the test's own, on a free 127.0.0.1 port, persisting nothing;
optionally with a password, or speaking only TLS with a certificate from a CA made here.

`make test` installs redis-server first (tests/install_deps.sh); when it is missing the tests
that need it fail with that hint rather than skip, so a green run always covers redis.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from ipaddress import IPv4Address
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

START_TIMEOUT_S = 5.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One redis-server process; `stop()` and `start()` again keep the port, so a client can
    see the server go away and come back."""

    def __init__(self, password: str | None = None, *, tls: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not on PATH: run tests/install_deps.sh (make test does)")
        self.binary = binary
        self.password = password
        self.port = free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="gw-redis-")
        self._proc: subprocess.Popen[bytes] | None = None
        self.ca_file: Path | None = None
        if tls:
            self.ca_file = write_certificates(Path(self._dir.name))

    def url(self, db: int = 0, password: str | None = None) -> str:
        """The server's URL, with `password` (the server's own by default) in the userinfo."""
        secret = self.password if password is None else password
        auth = f":{secret}@" if secret else ""
        scheme = "rediss" if self.ca_file else "redis"
        return f"{scheme}://{auth}127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        args = [self.binary, "--save", "", "--appendonly", "no"]
        args += ["--bind", "127.0.0.1", "--dir", self._dir.name]
        if self.ca_file:
            directory = self.ca_file.parent
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"]
            args += ["--tls-cert-file", str(directory / "server.pem")]
            args += ["--tls-key-file", str(directory / "server.key")]
            args += ["--tls-ca-cert-file", str(self.ca_file)]
        else:
            args += ["--port", str(self.port)]
        if self.password:
            args += ["--requirepass", self.password]
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_until_answering()
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()  # the Popen's own PID: only the server this helper started
        try:
            proc.wait(START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()

    def _wait_until_answering(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                pytest.fail(f"redis-server exited with {self._proc.returncode} on port {self.port}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return  # listening: with nothing to load, redis serves as soon as it listens
            except OSError:
                time.sleep(0.02)
        self.stop()
        pytest.fail(f"redis-server did not answer on port {self.port} in {START_TIMEOUT_S}s")


def write_certificates(directory: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1 signed by it, as PEM files in `directory`
    (server.pem, server.key); the CA's file, for clients to trust."""
    now = datetime.now(UTC)

    def certificate(
        subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gateway test CA")])
    ca_cert = (
        certificate("gateway test CA", ca_key, ca_name)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        certificate("127.0.0.1", server_key, ca_name)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    (directory / "server.pem").write_bytes(server_cert.public_bytes(pem))
    (directory / "server.key").write_bytes(
        server_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return directory / "ca.pem"


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A running redis-server without a password, stopped at the end of the test."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()
