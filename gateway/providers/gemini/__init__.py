"""The `gemini` kind: the Gemini API (generateContent, batchEmbedContents)."""
