"""The per-request StreamActor (the only awaiting code on the hot path), what it is handed
and answers (served.py), the sans-IO accumulator, pipeline and outbound encoders, and the
stream toward the client. The way out to the upstream is gateway/upstream/."""
