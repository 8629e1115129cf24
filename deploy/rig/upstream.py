"""The rig's upstream: tests/upstreams/openai_upstream.py's fake OpenAI (scenario by model
name: text, interleaved-2 parallel tool calls, text-then-call, think, ...) as a process.

    python -m deploy.rig.upstream      # prints its port on one line, serves until SIGTERM
"""

from __future__ import annotations

import signal
from typing import Any

from tests.upstreams.openai_upstream import FakeOpenAI


class _Forgetful(list[Any]):
    """FakeOpenAI records every request for tests to inspect; a load of tens of thousands of
    requests would only grow the process, so this list keeps nothing."""

    def append(self, item: Any) -> None:
        del item


def main() -> None:
    # Blocked before the server's thread starts, so that it inherits the mask and the
    # signals wait for sigwait below instead of killing the process mid-answer.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    upstream = FakeOpenAI()
    upstream.requests = _Forgetful()
    upstream.start()
    print(upstream.port, flush=True)
    signal.sigwait(stop_signals)
    upstream.stop()


if __name__ == "__main__":
    main()
