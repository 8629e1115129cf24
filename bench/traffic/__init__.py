"""A benchmark of real LLM traffic shape: thousands of long paced streams, large prompts and
tool-call streams, through each gateway pinned to one core (docs/benchmarks.md, "Real traffic
shape (bench/traffic)").

Modules: `hist` (mergeable log-bucket histograms), `wire` (the SSE answers' shape, shared by
both ends), `sse` (the client's chunked + SSE parser and answer checks), `upstream` (the paced
fake upstream), `client` (the load generator), `targets` (starting and sampling the gateways),
`scenarios`, `report` and `run` (the orchestrator, `python -m bench.traffic.run`).
"""
