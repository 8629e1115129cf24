"""In-process: what one upstream read brings leaves in one client write, and nothing that
could go now waits for a later read."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.stream.client_stream import ClientStream
from tests.inprocess import inprocess_gateway
from tests.upstreams.openai_upstream import FakeOpenAI


@pytest.fixture
async def served() -> AsyncIterator[tuple[TestServer, FakeOpenAI]]:
    async with inprocess_gateway() as pair:
        yield pair


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ClientStream write before the last ("write": through the actor's `write`, or
    `write_now` from the upstream connection's relay), and the last ("end")."""
    seen: list[str] = []
    write, write_now, end = ClientStream.write, ClientStream.write_now, ClientStream.end

    async def counted_write(self: ClientStream, data: bytes, *, progress: bool = True) -> None:
        if not self.can_write_now(len(data)):
            seen.append("write")  # a write with room is counted by write_now
        await write(self, data, progress=progress)

    def counted_write_now(self: ClientStream, data: bytes, *, progress: bool = True) -> None:
        seen.append("write")
        write_now(self, data, progress=progress)

    async def counted_end(self: ClientStream, data: bytes) -> object:
        seen.append("end")
        return await end(self, data)

    monkeypatch.setattr(ClientStream, "write", counted_write)
    monkeypatch.setattr(ClientStream, "write_now", counted_write_now)
    monkeypatch.setattr(ClientStream, "end", counted_end)
    return seen


async def _stream(server: TestServer, model: str, most: int = 1000) -> tuple[list[bytes], float]:
    """The stream's data lines (the first `most`), and how long after the request its
    first event came."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    loop = asyncio.get_running_loop()
    started = loop.time()
    first_at = 0.0
    lines: list[bytes] = []
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url("/v1/chat/completions"), json=body) as response,
    ):
        assert response.status == 200
        async for line in response.content:
            if line.startswith(b"data: "):
                first_at = first_at or loop.time() - started
                lines.append(line.strip())
                if len(lines) == most:
                    break
    return lines, first_at


async def test_a_stream_that_arrives_whole_is_one_write(
    served: tuple[TestServer, FakeOpenAI], writes: list[str]
) -> None:
    # `whole`: the upstream sends its headers, every event and its end in one write
    lines, _ = await _stream(served[0], "up/whole")
    assert writes == ["end"]
    assert lines[-1] == b"data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_events_that_arrive_apart_are_written_as_they_come(
    served: tuple[TestServer, FakeOpenAI], writes: list[str]
) -> None:
    # `slow`: one content event every 50 ms (the client leaves after three)
    lines, first_at = await _stream(served[0], "up/slow", most=3)
    assert first_at < 0.5, first_at
    assert len(lines) == 3
    assert writes[:3] == ["write", "write", "write"]


async def test_reads_in_full_flow_are_relayed_from_the_connection(
    served: tuple[TestServer, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    # once the head is out, a read the client's transport has room for is written from the
    # upstream connection's callback (stream/relay.py), not by waking the actor's task
    from gateway.stream.relay import Relay

    taken: list[bool] = []
    call = Relay.__call__

    def counted(self: Relay, data: bytes) -> bool:
        taken.append(call(self, data))
        return taken[-1]

    monkeypatch.setattr(Relay, "__call__", counted)
    lines, _ = await _stream(served[0], "up/slow", most=6)  # one event every 50 ms
    assert len(lines) == 6
    assert sum(taken) >= 3, taken
