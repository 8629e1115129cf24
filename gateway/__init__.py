"""An OpenAI-compatible LLM gateway. See ../shared/DESIGN.md for the architecture."""
