"""The `bedrock` kind: Amazon Bedrock (Converse / ConverseStream, InvokeModel embeddings; SigV4
or an API key)."""
