"""atheris harness for the `openai_responses` fuzz target (tests/fuzz/targets.py)."""

from fuzz.runner import main

if __name__ == "__main__":
    main("openai_responses")
