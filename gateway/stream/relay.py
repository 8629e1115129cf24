"""A committed stream's upstream reads relayed to the client from the connection's callback.

Once a stream's head is out and its body goes to the transport directly, each upstream read
can be decoded, translated, accumulated and written inside the upstream connection's
`data_received` (upstream/http_connection.py `relay`), without resolving a future and
stepping the actor's task (its dozen nested coroutines) for every chunk. The relay takes a
read only when the same work in the actor's read loop would not have waited: bytes have
already arrived on this attempt (the first byte's bookkeeping stays the loop's) and the
client's transport has room. Anything else (backpressure, the body's end, which leaves with
the tail) it declines, and the read loop does it as before; what it raises (an upstream
error event, a client that left) the loop's next read raises, with what came before the
error held in the client's pending bytes as the loop's own pipeline run would leave it.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Any

from gateway.stream.client_stream import ClientStream
from gateway.stream.deadlines import Deadlines
from gateway.stream.pipeline import ChunkPipeline


class Relay:
    """The relay for one attempt's read loop (a slotted object, not a closure: it is held by
    every open stream). `clock`: the loop's time; `processed(mark, output_seen)`: the actor's
    accounting of gateway time and the first token."""

    __slots__ = ("_acc", "_client", "_deadlines", "_decoder", "_pipeline", "clock", "processed")

    def __init__(
        self,
        client: ClientStream,
        decoder: Any,
        pipeline: ChunkPipeline,
        deadlines: Deadlines,
        clock: Callable[[], float],
        processed: Callable[[float, bool], None],
    ) -> None:
        self._client = client
        self._decoder = decoder
        self._pipeline = pipeline
        self._acc = pipeline.acc
        self._deadlines = deadlines
        self.clock = clock
        self.processed = processed

    def __call__(self, data: bytes) -> bool:
        client, deadlines = self._client, self._deadlines
        if not deadlines.got_bytes or not client.can_write_now(len(data)):
            return False
        mark = perf_counter()
        deadlines.last_upstream = self.clock()
        out = self._pipeline.run(self._decoder.feed(data), client)
        self.processed(mark, self._acc.output_seen)
        if out:
            client.write_now(b"".join(out) if len(out) > 1 else out[0])
        return True
