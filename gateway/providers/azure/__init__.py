"""The `azure` kind: Azure OpenAI / AI Foundry (the OpenAI wire format at Azure's URLs, `api-
key` auth)."""
