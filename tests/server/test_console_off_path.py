"""The console is served by the same process, but no inference request runs any of its code:
with the console on (and its sampler asleep between samples), twenty chat completions,
streamed and not, execute not one function of gateway/console/."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from tests.upstreams.openai_upstream import FakeOpenAI

CONSOLE_DIR = str(Path(__file__).resolve().parents[2] / "gateway" / "console")


async def test_inference_requests_run_no_console_code(tmp_path: Path) -> None:
    fake = FakeOpenAI().start()
    config = parse_config(
        f"""
store: {{url: "sqlite:///{tmp_path / "gw.db"}"}}
auth: {{master_key: mk-test}}
console: {{overview_interval_s: 60}}
providers:
  - {{name: up, kind: openai, base_url: "{fake.base_url}", keys: [{{key: k1}}]}}
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    ran: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(CONSOLE_DIR):
            ran.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(server.make_url("/ui/")) as page:  # the console is there
                assert page.status == 200
            sys.setprofile(profile)
            try:
                for n in range(20):
                    body = {
                        "model": "up/text",
                        "messages": [{"role": "user", "content": "hi"}],
                        "stream": n % 2 == 0,
                    }
                    async with http.post(
                        server.make_url("/v1/chat/completions"),
                        json=body,
                        headers={"Authorization": "Bearer mk-test"},
                    ) as answer:
                        assert answer.status == 200
                        await answer.read()
            finally:
                sys.setprofile(None)
    finally:
        await server.close()
        fake.stop()
    assert ran == []
