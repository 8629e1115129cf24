"""An OpenAI-compatible LLM gateway. See docs/design.md for the architecture."""
