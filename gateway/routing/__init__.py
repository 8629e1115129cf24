"""Which upstream attempts a request gets (model -> targets -> keys), and the health of every
key that decides it. `health`, `balancer` and `retry_after` are policy without IO (times are
passed in); `router` reads the clock; `events` logs and counts; `sync` shares key health
through the store. Nothing here imports the server or the stream actor."""
