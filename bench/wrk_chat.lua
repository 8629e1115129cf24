-- wrk script for bench/load.py: POST one chat completion body, report one JSON line.
--
-- Environment:
--   BENCH_BODY   the JSON request body, sent as is with every request (required)
--   BENCH_KEY    the bearer token (default "bench"; bench.load --full sets a virtual key)
--   BENCH_UNIQUE a prefix (one per wrk run): the first "hi" of the body becomes
--                "hi <prefix> <n>", n counting the requests, so none repeats another (the
--                response cache's misses: bench.load --observe cache-miss)
--
-- Without BENCH_UNIQUE the request is static (no request() or response() function), so
-- wrk builds it once and never calls into Lua per request: the load generator stays cheap.
-- wrk measures latency from writing the request to reading the last byte of the response
-- (for SSE: the whole stream).
--
-- Output, in done(): one line "BENCH_WRK_JSON {...}" with latencies in microseconds,
-- duration in microseconds and wrk's error counters. wrk counts every response with a
-- status >= 400 in "status"; socket errors are connect/read/write/timeout.

local body = os.getenv("BENCH_BODY")
if body == nil or body == "" then
  error("BENCH_BODY is not set")
end

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("BENCH_KEY") or "bench")

local unique = os.getenv("BENCH_UNIQUE")
if unique ~= nil and unique ~= "" then
  local head, tail = body:match('^(.-"hi)(".*)$')
  if head == nil then
    error('BENCH_UNIQUE: the body has no "hi" to vary')
  end
  local n = 0
  function request()
    n = n + 1
    return wrk.format(nil, nil, nil, head .. " " .. unique .. " " .. n .. tail)
  end
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    "BENCH_WRK_JSON {\"requests\":%d,\"duration_us\":%d,\"bytes\":%d," ..
    "\"errors\":{\"connect\":%d,\"read\":%d,\"write\":%d,\"status\":%d,\"timeout\":%d}," ..
    "\"latency_us\":{\"min\":%d,\"mean\":%.1f,\"max\":%d,\"stdev\":%.1f," ..
    "\"p50\":%d,\"p90\":%d,\"p99\":%d,\"p99.9\":%d}}\n",
    summary.requests, summary.duration, summary.bytes,
    errors.connect, errors.read, errors.write, errors.status, errors.timeout,
    latency.min, latency.mean, latency.max, latency.stdev,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9)))
end
