"""Fuzzing the sans-IO core: hostile and malformed input for every decoder and translator.

`targets.py` holds the targets, one function per decoder or translator taking bytes and
checking the contract (only the documented protocol error, bounded buffers, output that
is still well formed); the hypothesis tests here and the atheris harnesses in `fuzz/` both
run them. See docs/testing.md.
"""
