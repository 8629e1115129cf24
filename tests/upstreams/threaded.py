"""A fake upstream's lifecycle: an aiohttp server on 127.0.0.1, on its own thread and event
loop, so tests with synchronous clients (openai-python, langchain) can drive it."""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


class ThreadedUpstream:
    """Subclasses add their routes in `routes()` and say their SDK base URL's path."""

    name = "fake-upstream"
    base_path = ""  # appended to http://127.0.0.1:PORT in `base_url`

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    def start(self) -> Self:
        ready = threading.Event()

        def main() -> None:
            loop = self._loop = asyncio.new_event_loop()
            loop.run_until_complete(self._start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._stop())
            loop.close()

        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{self.name} did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
