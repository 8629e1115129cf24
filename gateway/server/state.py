"""What the Application shares with its handlers, under typed AppKeys."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from gateway.config import Config
from gateway.routing.router import Router

if TYPE_CHECKING:
    from gateway.stream.actor import StreamActor


class GatewayState:
    """The running gateway: its config, router, upstream pool and the requests in flight."""

    def __init__(self, config: Config, router: Router) -> None:
        self.config = config
        self.router = router
        self.session: aiohttp.ClientSession | None = None
        self.active: set[StreamActor] = set()
        self.idle = asyncio.Event()  # set whenever no request is in flight
        self.idle.set()
        self.draining = False

    def enter(self, actor: StreamActor) -> None:
        self.active.add(actor)
        self.idle.clear()

    def leave(self, actor: StreamActor) -> None:
        self.active.discard(actor)
        if not self.active:
            self.idle.set()


STATE = web.AppKey("gateway_state", GatewayState)
REQUEST_ID = web.RequestKey("request_id", str)
