"""atheris harness for the `http1` fuzz target (tests/fuzz/targets.py)."""

from fuzz.runner import main

if __name__ == "__main__":
    main("http1")
