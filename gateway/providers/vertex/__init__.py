"""The `vertex` kind: Gemini models on Google Cloud Vertex AI (an OAuth token per request)."""
