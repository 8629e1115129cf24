"""An environment for one test in which the cloud libraries find only what the test set:
HOME, the AWS shared files, gcloud's and azure's config directories in a temp directory,
every variable those libraries read cleared, and the metadata endpoints pointed at a closed
loopback port (so nothing probes 169.254.169.254)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

PREFIXES = ("AWS_", "GOOGLE_", "GCE_", "CLOUDSDK_", "AZURE_", "MSI_", "IDENTITY_", "IMDS_")
PROXIES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def isolated_env(tmp: Path) -> dict[str, str]:
    """The process environment without any cloud or proxy setting, homes in `tmp`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIXES) and k not in PROXIES}
    home = tmp / "home"
    (home / ".aws").mkdir(parents=True, exist_ok=True)
    dead = f"127.0.0.1:{closed_port()}"
    env.update(
        HOME=str(home),
        AWS_CONFIG_FILE=str(home / ".aws" / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(home / ".aws" / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_METADATA_SERVICE_NUM_ATTEMPTS="1",
        AWS_METADATA_SERVICE_TIMEOUT="1",
        CLOUDSDK_CONFIG=str(home / "gcloud"),
        AZURE_CONFIG_DIR=str(home / "azure"),
        GCE_METADATA_HOST=dead,
        GCE_METADATA_IP=dead,
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        # managed identity (azure) at a closed loopback port, not the link-local IMDS
        IDENTITY_ENDPOINT=f"http://{dead}/msi/token",
        IMDS_ENDPOINT=f"http://{dead}",
        IDENTITY_HEADER="unused",
    )
    return env


def isolate(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> dict[str, str]:
    """`isolated_env` applied to this process (the in-process fetchers read os.environ)."""
    env = isolated_env(tmp)
    for name in list(os.environ):
        if name not in env:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env
