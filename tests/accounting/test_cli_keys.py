"""`gateway keys create|list|revoke` against the configured store: a key made by the CLI
works on a gateway using the same store, and a key revoked by the CLI stops working."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from gateway.cli import main
from tests.accounting.inprocess import accounting_gateway
from tests.accounting.inprocess import bearer
from tests.accounting.inprocess import config_text
from tests.upstreams.openai_upstream import FakeOpenAI

CHAT = {"model": "priced", "messages": [{"role": "user", "content": "hi"}]}


async def status_with(url: str, fake: FakeOpenAI, secret: str) -> int:
    async with (
        accounting_gateway(url, fake=fake) as (server, _),
        aiohttp.ClientSession() as s,
        s.post(server.make_url("/v1/chat/completions"), json=CHAT, headers=bearer(secret)) as r,
    ):
        return r.status


def test_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/keys.db"
    fake = FakeOpenAI().start()
    try:
        config = tmp_path / "gateway.yaml"
        config.write_text(config_text(fake.base_url, url))
        args = ["keys", "--config", str(config)]
        assert (
            main(
                [
                    *args,
                    "create",
                    "--name",
                    "cli",
                    "--budget-usd",
                    "2",
                    "--model",
                    "priced",
                    "--metadata",
                    '{"team": "x"}',
                ]
            )
            == 0
        )
        created = json.loads(capsys.readouterr().out)
        secret, key_id = created["key"], created["id"]
        assert (created["budget_usd"], created["models"]) == (2.0, ["priced"])
        assert asyncio.run(status_with(url, fake, secret)) == 200

        assert main([*args, "list"]) == 0
        out = capsys.readouterr().out
        listed = json.loads(out)["data"]
        assert [k["id"] for k in listed] == ["cfg-ci", key_id]
        assert secret not in out

        assert main([*args, "revoke", key_id]) == 0
        assert json.loads(capsys.readouterr().out) == {"id": key_id, "revoked": True}
        assert asyncio.run(status_with(url, fake, secret)) == 401

        assert main([*args, "revoke", "cfg-ci"]) == 1
        assert main([*args, "revoke", "key_missing"]) == 1
        assert main([*args, "create", "--name", "bad", "--rpm", "0"]) == 1
        assert "rpm" in capsys.readouterr().err
    finally:
        fake.stop()
