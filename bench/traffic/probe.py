"""The event-loop-lag probe: a cheap GET on its own keep-alive connection, ~20 times a second.

    python -m bench.traffic.probe --port 9000 --path /healthz [--hz 20] [--max-s 120]

A gateway whose event loop is busy relaying thousands of streams answers even a trivial route
late; this probe's latency is that lag (plus a loopback round trip, ~0.1 ms). The orchestrator
runs it pinned to the target's CPU, so the harness's own load on CPU 0 does not enter it, and
stops it with SIGTERM; it then prints `PROBE_JSON {...}` (a hist.Histogram of the latencies,
probes sent, errors). A probe that gets no answer within `--timeout` counts as an error and
records the timeout as its latency.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time

from bench.traffic.hist import Histogram


class Prober:
    def __init__(self, port: int, path: str, timeout: float) -> None:
        self.port = port
        self.request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
        self.timeout = timeout
        self.sock: socket.socket | None = None

    def once(self) -> int:
        """One probe; returns its status (raises OSError when the connection fails)."""
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = self.sock
        sock.sendall(self.request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("closed")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        close = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"connection" and b"close" in value.lower():
                close = True
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("closed")
            body += chunk
        if close:
            self.close()
        return int(head.split(b" ", 2)[1])

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.traffic.probe", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/healthz")
    parser.add_argument("--hz", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--max-s", type=float, default=120.0, help="stops by itself after this")
    args = parser.parse_args(argv)
    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    prober = Prober(args.port, args.path, args.timeout)
    latency = Histogram()
    sent, errors, statuses = 0, 0, {}
    period = 1.0 / args.hz
    deadline = time.monotonic() + args.max_s
    next_at = time.monotonic()
    while not stopping and time.monotonic() < deadline:
        start = time.monotonic_ns()
        sent += 1
        try:
            status = prober.once()
            statuses[status] = statuses.get(status, 0) + 1
            latency.record_ns(time.monotonic_ns() - start)
        except OSError:
            errors += 1
            latency.record_ns(time.monotonic_ns() - start)
            prober.close()
        next_at += period
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            next_at = time.monotonic()  # late: no burst to catch up
    out = {"latency": latency.to_dict(), "sent": sent, "errors": errors, "statuses": statuses}
    print("PROBE_JSON " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
