"""The `ollama` kind: an Ollama server (/api/chat NDJSON, /api/embed)."""
