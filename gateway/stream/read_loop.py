"""A stream attempt's read loop (the actor's, stream/actor.py): read the upstream body,
feed the framing decoder, the translator and the accumulator (the pipeline), write what comes
out to the client, under the lazy alarm of the deadlines. In full flow, once the client's
writes go straight to its transport, the reads are relayed from the connection's callback
instead (stream/relay.py). What the actor keeps of it (the first byte's time, the gateway's
own time, the first token's) it learns through `first_byte`, `processed` and `on_wake`.
"""

from __future__ import annotations

import asyncio
from time import perf_counter
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol

from gateway.errors import UpstreamProtocolError
from gateway.stream.client_stream import ClientStream
from gateway.stream.deadlines import Deadlines
from gateway.stream.pipeline import ChunkPipeline
from gateway.stream.relay import Relay
from gateway.upstream.http_connection import UpstreamResponse
from gateway.upstream.transport import UpstreamBody

if TYPE_CHECKING:
    from gateway.upstream.attempts import AttemptRunner


class ReadingActor(Protocol):
    """What the read loop needs of the actor whose attempt it reads."""

    loop: asyncio.AbstractEventLoop
    runner: AttemptRunner
    client: ClientStream
    first_byte: float

    @property
    def committed(self) -> bool: ...

    def processed(self, mark: float, output_seen: bool) -> None: ...

    async def on_wake(self, deadlines: Deadlines) -> None: ...


async def read_to_end(
    actor: ReadingActor,
    body: UpstreamBody,
    decoder: Any,
    pipeline: ChunkPipeline,
    deadlines: Deadlines,
    deliver: bool,
) -> None:
    """Read the body to its end under the lazy timer (armed by the caller)."""
    loop, alarm, client = actor.loop, actor.runner.alarm, actor.client
    acc, translator = pipeline.acc, pipeline.translator
    spill = client if deliver else None
    # once the client's writes go straight to its transport, reads in full flow are
    # relayed from the connection's callback (stream/relay.py); cleared on the way out
    # (it refers to the actor: no cycle outlives the loop)
    connection = body.connection if deliver and isinstance(body, UpstreamResponse) else None
    to_engage = connection is not None
    try:
        while True:
            try:
                while True:
                    if to_engage and client.writes_directly:
                        assert connection is not None
                        connection.relay = Relay(
                            client, decoder, pipeline, deadlines, loop.time, actor.processed
                        )
                        to_engage = False
                    data = await body.read()
                    mark = perf_counter()
                    deadlines.last_upstream = now = loop.time()
                    if not deadlines.got_bytes:
                        actor.first_byte = now
                        deadlines.got_bytes = True
                    if not data:
                        out = pipeline.run(decoder.close(), spill, closing=True)
                        actor.processed(mark, acc.output_seen)
                        if not translator.done and (not acc.choices or acc.unfinished_choices()):
                            raise UpstreamProtocolError(
                                "the upstream closed the stream before it finished"
                            )
                        if deliver:
                            client.pending.extend(out)  # leaves with the tail
                        return
                    out = pipeline.run(decoder.feed(data), spill)
                    actor.processed(mark, acc.output_seen)
                    if deliver and out:
                        # with the body's end already here, these bytes leave with the
                        # tail in one write (nothing waits that could have gone now)
                        await client.deliver(out, acc.output_seen, body.ended)
                    del data, out  # not held while the next read waits, by every stream
            except asyncio.CancelledError:
                if not alarm.expired():
                    raise
            await actor.on_wake(deadlines)
            alarm.arm(deadlines.next_wake(actor.committed))
    finally:
        if connection is not None:
            connection.relay = None
