"""A fake OpenAI upstream that fails the first N requests carrying a marker, then answers:
`fail: {"status": 500}` once (S03, a 500 once), or `{"status": 429, "retry_after": "1"}`
(S01, a 429 with Retry-After), or any status with its own `"error"` body (S12, a context
length exceeded), chosen per marker with `script(marker, failures)`. Every
request is recorded with the loop time it arrived at (`arrivals`)."""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from tests.upstreams.faulty_wire import openai_completion
from tests.upstreams.faulty_wire import openai_error
from tests.upstreams.faulty_wire import openai_events
from tests.upstreams.threaded import ThreadedUpstream


class FlakyOpenAI(ThreadedUpstream):
    name = "flaky-openai"
    base_path = "/v1"

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[tuple[str, float]] = []  # (the request's text, monotonic time)
        self._scripts: dict[str, list[dict[str, Any]]] = {}

    def script(self, marker: str, failures: list[dict[str, Any]]) -> None:
        self._scripts[marker] = list(failures)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text = json.dumps(body["messages"])
        self.arrivals.append((text, time.monotonic()))
        for marker, failures in self._scripts.items():
            if marker in text and failures:
                failure = failures.pop(0)
                headers = {}
                if "retry_after" in failure:
                    headers["Retry-After"] = failure["retry_after"]
                status = failure["status"]
                error = failure.get("error") or openai_error(status, f"scripted {status}")
                return web.json_response(error, status=status, headers=headers)
        if body.get("stream"):
            answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await answer.prepare(request)
            await answer.write(b"".join(openai_events(tools=False)))
            await answer.write_eof()
            return answer
        return web.json_response(openai_completion(tools=False))

    def count(self, marker: str) -> int:
        return sum(marker in text for text, _ in self.arrivals)
