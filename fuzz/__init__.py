"""atheris harnesses, one per fuzz target (`fuzz_<name>.py`), sharing `runner.py`.

The targets themselves, and the contract they check, are in tests/fuzz/targets.py (the
hypothesis tests run the same functions). `python -m fuzz.run_all --seconds 60` runs every
harness for a bounded time and reports executions; `make fuzz` does that. See docs/testing.md.
"""
