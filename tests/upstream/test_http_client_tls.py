"""The upstream client over TLS, against a local server with a certificate made for the test."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from gateway.errors import UpstreamConnectError
from gateway.upstream.http_client import HttpPool

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=gateway-test",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return key, cert


async def test_https_request_and_keepalive(certificate: tuple[Path, Path]) -> None:
    key, cert = certificate
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    seen: list[bytes] = []
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                seen.append(head + await reader.readexactly(length))
                writer.write(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    pool = HttpPool(ssl.create_default_context(cafile=str(cert)))
    try:
        for _ in range(2):
            response = await pool.request(
                f"https://127.0.0.1:{port}/v1/chat/completions",
                {"Authorization": "Bearer k"},
                b"{}",
                connect_s=5,
            )
            assert response.status == 200
            body = b""
            while part := await response.read():
                body += part
            assert body == b"hello"
            response.release()
        assert connections == 1  # the TLS connection was kept alive and reused
        assert seen[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
        assert b"\r\nHost: 127.0.0.1:%d\r\n" % port in seen[0]

        untrusting = HttpPool()  # the system store does not know the test's certificate
        with pytest.raises(UpstreamConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusting.request(f"https://127.0.0.1:{port}/", {}, b"", connect_s=5)
        untrusting.close()
    finally:
        pool.close()
        server.close()
        await server.wait_closed()
