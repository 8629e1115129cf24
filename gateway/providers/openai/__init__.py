"""The `openai` kind: OpenAI and any OpenAI-compatible server (Chat Completions, Responses,
embeddings)."""
