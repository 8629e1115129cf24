"""What the chaos run (tests/e2e/test_chaos.py) counts as a proper answer: the healthy answer
whole (the text, the exact tool calls, one finish, one chunk id and role, `[DONE]`) or a
proper error (an OpenAI-shaped HTTP error, or for a committed stream an error event after a
start of the answer, then `[DONE]`); and how it reads the gateway's sockets afterwards."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.upstreams.faulty_upstream import CALLS
from tests.upstreams.faulty_upstream import TEXT

PROPER_ERROR_STATUSES = {429, 502, 503, 504}
TCP_CLOSE_WAIT = "08"


@dataclass(frozen=True)
class Spec:
    """One request of the run and the failures its upstream attempts will meet."""

    tag: str
    model: str
    stream: bool
    tools: bool
    modes: tuple[str, ...]


class Corrupted(Exception):
    """The answer is neither the healthy answer nor a proper error."""


def check(cond: bool, why: str) -> None:
    if not cond:
        raise Corrupted(why)


def check_error_object(error: Any) -> None:
    check(isinstance(error, dict), f"error is not an object: {error!r}")
    check(set(error) == {"message", "type", "param", "code"}, f"error shape: {error!r}")
    check(isinstance(error["message"], str) and bool(error["message"]), "empty error message")


def expected_calls(spec: Spec) -> list[tuple[str, Any]]:
    return list(CALLS) if spec.tools else []


def check_message(spec: Spec, body: bytes) -> None:
    completion = json.loads(body)
    check(completion.get("object") == "chat.completion", f"not a completion: {body[:200]!r}")
    choices = completion["choices"]
    check(len(choices) == 1, "choices")
    message = choices[0]["message"]
    check(message.get("content") == TEXT, f"content {message.get('content')!r}")
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]
    check(calls == expected_calls(spec), f"tool calls {calls!r}")
    finish = "tool_calls" if spec.tools else "stop"
    check(choices[0]["finish_reason"] == finish, f"finish {choices[0]['finish_reason']!r}")


def sse_payloads(body: bytes) -> list[bytes]:
    out = []
    for frame in body.split(b"\n\n"):
        lines = [ln for ln in frame.split(b"\n") if ln and not ln.startswith(b":")]
        if lines:
            check(all(ln.startswith(b"data: ") for ln in lines), f"not a data frame: {frame!r}")
            out.append(b"\n".join(ln.removeprefix(b"data: ") for ln in lines))
    return out


def check_stream(spec: Spec, body: bytes) -> str:
    """'success' or 'error' for a 200 stream; raises Corrupted for anything else."""
    payloads = sse_payloads(body)
    check(bool(payloads) and payloads[-1] == b"[DONE]", "the stream does not end with [DONE]")
    check(payloads.count(b"[DONE]") == 1, "[DONE] more than once")
    events = [json.loads(p) for p in payloads[:-1]]
    errors = [i for i, e in enumerate(events) if "error" in e]
    check(errors in ([], [len(events) - 1]), "an error event that is not the last event")
    text, finishes, roles, ids = "", [], 0, set()
    calls: dict[int, list[str]] = {}
    for event in events[: len(events) - len(errors)]:
        check(event.get("object") == "chat.completion.chunk", f"not a chunk: {event!r}")
        ids.add(event.get("id"))
        for choice in event["choices"]:
            check(choice["index"] == 0, "a second choice")
            delta = choice["delta"]
            roles += delta.get("role") is not None
            text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call["index"], ["", ""])
                slot[0] += call.get("function", {}).get("name") or ""
                slot[1] += call.get("function", {}).get("arguments") or ""
            if choice.get("finish_reason") is not None:
                finishes.append(choice["finish_reason"])
    # one stream, however many attempts (a continued one too): one identity, one role
    check(len(ids) <= 1, f"chunk ids {ids}")
    check(roles <= 1, f"{roles} roles")
    if errors:
        check_error_object(events[-1]["error"])
        check(TEXT.startswith(text), f"text before the error is not the answer's: {text!r}")
        check(not finishes, "a finish_reason, then an error")
        return "error"
    parsed = [(name, json.loads(args)) for _, (name, args) in sorted(calls.items())]
    check(roles == 1, "no role")
    check(text == TEXT, f"text {text!r}")
    check(sorted(calls) == list(range(len(calls))), f"tool call indices {sorted(calls)}")
    check(parsed == expected_calls(spec), f"tool calls {parsed!r}")
    check(finishes == ["tool_calls" if spec.tools else "stop"], f"finish reasons {finishes}")
    return "success"


def classify(spec: Spec, status: int, headers: Any, body: bytes, attempts_bound: int) -> str:
    """'success' or 'error' for a proper answer (`attempts_bound`: the most attempts a
    request may make); raises Corrupted for anything else."""
    if status != 200:
        check(status in PROPER_ERROR_STATUSES, f"status {status}: {body[:300]!r}")
        parsed = json.loads(body)
        check(set(parsed) == {"error"}, f"error body {body[:300]!r}")
        check_error_object(parsed["error"])
        return "error"
    attempts = int(headers.get("x-gateway-attempts", "0"))
    check(1 <= attempts <= attempts_bound, f"x-gateway-attempts {attempts}")
    if spec.stream:
        return check_stream(spec, body)
    check_message(spec, body)
    return "success"


def gateway_sockets(pid: int) -> tuple[int, Counter[str]]:
    """The process's open fd count, and the TCP states of its sockets (by /proc/net/tcp)."""
    inodes = set()
    fds = os.listdir(f"/proc/{pid}/fd")
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed while listing
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    states: Counter[str] = Counter()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                states[fields[3]] += 1
    return len(fds), states
