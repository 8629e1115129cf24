"""The per-request StreamActor (the only awaiting code on the hot path), the sans-IO
accumulator and outbound encoders, and the upstream transport boundary."""
