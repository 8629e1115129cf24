"""atheris harness for the `messages_request` fuzz target (tests/fuzz/targets.py)."""

from fuzz.runner import main

if __name__ == "__main__":
    main("messages_request")
