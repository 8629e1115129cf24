"""The `anthropic` kind: the Anthropic Messages API (chat, native Messages, count_tokens)."""
