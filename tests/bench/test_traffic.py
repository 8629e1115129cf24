"""The traffic benchmark (bench/traffic): its histograms, its client's parser and checks, and a
smoke run of `--quick` against the fake upstream and our gateway."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import msgspec
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from bench.traffic import wire
from bench.traffic.answers import STREAM_HEAD
from bench.traffic.answers import Events
from bench.traffic.answers import Shape
from bench.traffic.answers import Stream
from bench.traffic.answers import frame
from bench.traffic.hist import Histogram
from bench.traffic.hist import merged
from bench.traffic.sse import ResponseReader

REPO = Path(__file__).resolve().parents[2]


# -- histograms
def test_percentiles_are_within_a_bucket_of_the_true_value() -> None:
    hist = Histogram()
    values = [float(v) for v in range(1, 100_001)]  # 1 µs .. 100 ms
    for value in values:
        hist.record(value)
    for pct in (50.0, 90.0, 99.0, 99.9):
        true = values[math.ceil(len(values) * pct / 100) - 1]
        got = hist.percentile(pct)
        assert got is not None
        assert true <= got <= true * 1.024
    assert hist.percentile(100.0) == hist.max_us == 100_000.0
    assert hist.summary_ms()["max"] == 100.0


def test_merged_histograms_equal_one_that_saw_everything() -> None:
    parts = [Histogram() for _ in range(3)]
    whole = Histogram()
    for index, value in enumerate([0.2, 3.0, 45.0, 7_000.0, 2e6, 5e8, 12.5, 999.0]):
        parts[index % 3].record(value)
        whole.record(value)
    # through JSON, as the client processes send them
    revived = [Histogram.from_dict(json.loads(json.dumps(part.to_dict()))) for part in parts]
    total = merged(revived)
    assert total.counts == whole.counts
    assert (total.count, total.max_us) == (whole.count, whole.max_us)
    assert total.summary_ms() == whole.summary_ms()
    assert math.isclose(total.total_us, whole.total_us)


def test_an_empty_histogram_has_no_percentiles() -> None:
    assert Histogram().percentile(50) is None
    assert Histogram().summary_ms()["p99"] is None


# -- the reader, fed the fake upstream's own bytes
def stream_bytes(chunks: int, tools: bool, usage: bool = True) -> bytes:
    events = Events(created=1)
    stream = Stream(None, Shape(chunks, 10.0, 24), 1 if usage else 0, tools)  # type: ignore[arg-type]
    out = STREAM_HEAD + frame(events.role[stream.flag])
    while stream.next_step < stream.shape.chunks:
        out += stream.step_bytes(events, time.monotonic_ns())
    return out


def read(data: bytes, cuts: list[int], tools: bool, chunks: int) -> ResponseReader:
    reader = ResponseReader(Histogram(), Histogram(), tools, chunks, expect_usage=True)
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    complete = False
    for start, end in itertools.pairwise(points):
        assert not complete, "complete before the last byte"
        complete = reader.feed(data[start:end], time.monotonic_ns())
    assert complete
    return reader


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=40))
def test_a_stream_split_anywhere_reads_the_same(cuts: list[int]) -> None:
    reader = read(stream_bytes(7, tools=False), cuts, tools=False, chunks=7)
    assert (reader.kind, reader.chunks, reader.done, reader.usage) == (None, 7, True, True)
    assert reader.delay.count == 7
    assert reader.gap.count == 6


@settings(max_examples=100, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=40),
    chunks=st.integers(min_value=2, max_value=9),
)
def test_a_tools_stream_split_anywhere_reassembles(cuts: list[int], chunks: int) -> None:
    reader = read(stream_bytes(chunks, tools=True), cuts, tools=True, chunks=chunks)
    assert reader.kind is None
    assert reader.chunks == chunks
    assert wire.check_tool_calls(reader.calls) is None
    assert [reader.calls[i]["name"] for i in (0, 1)] == ["get_weather", "get_time"]


def reframed(data: bytes, edit: bytes, to: bytes) -> bytes:
    """The same response with `edit` replaced by `to` inside every HTTP chunk, re-framed."""
    head, _, body = data.partition(b"\r\n\r\n")
    out = head + b"\r\n\r\n"
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out + b"0\r\n\r\n"
        out += frame(body[:size].replace(edit, to))
        body = body[size + 2 :]
    return out


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=40))
def test_crlf_line_ends_split_anywhere_read_the_same(cuts: list[int]) -> None:
    data = reframed(stream_bytes(5, tools=False), b"\n", b"\r\n")
    assert data.count(b"\r\n\r\n\r\n") >= 5  # each event ends CRLF CRLF, then its chunk CRLF
    reader = read(data, cuts, tools=False, chunks=5)
    assert (reader.kind, reader.chunks, reader.done) == (None, 5, True)


def test_a_wrong_tool_call_is_an_error() -> None:
    right = stream_bytes(6, tools=True)
    for wrong in (
        right.replace(b"Paris", b"Lyon!"),  # an argument's value
        right.replace(b"call_traffic_1", b"call_traffic_9"),  # an id
        right.replace(b'"get_time"', b'"get_date"'),  # a name
        right.replace(b'"index":1,"function"', b'"index":0,"function"'),  # deltas of one index
    ):
        reader = read(wrong, [], tools=True, chunks=6)
        assert reader.kind == "tools_mismatch"


def test_check_tool_calls_compares_parsed_arguments() -> None:
    calls = {
        i: {"id": call_id, "name": name, "arguments": json.dumps(dict(args, pad="@1;xx"))}
        for i, (call_id, name, args) in enumerate(wire.TOOL_CALLS)
    }
    assert wire.check_tool_calls(calls) is None
    calls[1]["arguments"] = json.dumps({"timezone": "UTC", "pad": "@1;"})
    assert wire.check_tool_calls(calls) == "call 1 arguments {'timezone': 'UTC'}"
    calls[1]["arguments"] = '{"timezone": "Europe/Paris", "pad": "@1;'  # cut short
    assert wire.check_tool_calls(calls) == "call 1 arguments do not parse"
    del calls[1]
    assert wire.check_tool_calls(calls) == "indexes [0]"


def test_answers_that_are_not_right_get_their_kind() -> None:
    right = stream_bytes(4, tools=False)
    no_done = right.replace(frame(b"data: [DONE]\n\n"), b"")
    assert read(no_done, [], False, 4).kind == "no_done"
    assert read(right, [], False, 5).kind == "missing_chunks"
    broken = reframed(right, b'"finish_reason":"stop"', b'"finish_reason":"stop"}}')
    assert read(broken, [], False, 4).kind == "bad_json"
    body = b'{"error": {"message": "slow down", "type": "rate_limit", "code": "rpm"}}'
    head = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: %d\r\n\r\n" % len(body)
    assert read(head + body, [3, 50], False, 4).kind == "status_429:rpm"
    reader = ResponseReader(Histogram(), Histogram(), False, 4, expect_usage=True)
    assert not reader.feed(right[:-30], time.monotonic_ns())
    assert reader.eof(time.monotonic_ns())
    assert reader.kind == "truncated"


def test_a_non_stream_answer_is_checked() -> None:
    events = Events(created=1)
    for tools in (False, True):
        answer = events.completion(Shape(3, 0.0, 20), tools)
        reader = read(answer, [17, 100], tools=tools, chunks=1 if not tools else 2)
        assert reader.kind is None
        body = msgspec.json.decode(answer.split(b"\r\n\r\n", 1)[1])
        assert body["choices"][0]["finish_reason"] == ("tool_calls" if tools else "stop")


def test_a_request_body_has_the_asked_size_and_fields() -> None:
    for size in (1024, 100 * 1024):
        body = wire.request_body("m", size, stream=True, tools=True)
        assert abs(len(body) - size) <= 1
        decoded = json.loads(body)
        assert decoded["stream_options"] == {"include_usage": True}
        assert [t["function"]["name"] for t in decoded["tools"]] == ["get_weather", "get_time"]


# -- the whole harness, small
def test_the_quick_preset_runs_clean_against_direct_and_ours(tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bench.traffic.run", "--quick", "--out-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "table.md").read_text().count("| ours |") >= 5
    rows = result["rows"]
    assert {row["target"] for row in rows} == {"direct", "ours"}
    assert {row["scenario"] for row in rows} == {"streams", "long", "held", "prompt", "tools"}
    for row in rows:
        where = f"{row['scenario']} {row['cell']} {row['target']}"
        assert row["error_total"] == 0, (where, row["errors"])
        assert row["ok"] > 0, where
        assert 0 < row["latency"]["p50"] < 10_000, where
        assert row["delay"]["count"] == row["chunks"] > 0, where
        assert 0 <= row["delay"]["p50"] < 100, where
        assert row["peak_rss_mib"] > 10, where
        assert row["cpu_us_per_chunk"] is not None, where
        assert row["probe"]["count"] > 0, where
        if row["target"] == "ours":
            assert row["added_delay"]["p50"] is not None, where
    assert result["notes"] == []
    assert elapsed < 60
