"""atheris harness for the `errors` fuzz target (tests/fuzz/targets.py)."""

from fuzz.runner import main

if __name__ == "__main__":
    main("errors")
