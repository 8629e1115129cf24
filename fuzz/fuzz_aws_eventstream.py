"""atheris harness for the `aws_eventstream` fuzz target (tests/fuzz/targets.py)."""

from fuzz.runner import main

if __name__ == "__main__":
    main("aws_eventstream")
