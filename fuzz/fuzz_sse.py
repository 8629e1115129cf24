"""atheris harness for the `sse` fuzz target (tests/fuzz/targets.py)."""

from fuzz.runner import main

if __name__ == "__main__":
    main("sse")
