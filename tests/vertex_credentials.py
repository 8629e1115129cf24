"""A Google service-account credentials file made for the tests: a fresh RSA key and a
`token_uri` on a loopback fake, so the real google-auth code path runs without Google."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def service_account_file(folder: Path, token_uri: str) -> Path:
    key = folder / "sa-key.pem"
    subprocess.run(
        [
            "openssl",
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            str(key),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    path = folder / "service-account.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "test-project",
                "private_key_id": "test-key-id",
                "private_key": key.read_text(),
                "client_email": "gateway-test@test-project.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": token_uri,
            }
        )
    )
    return path
