"""Embeddings calls, sans-IO: one module per provider family builds the upstream requests
for an OpenAI embeddings request (several when the provider caps the inputs per call) and
parses each upstream answer; `base` merges the parts back in input order and renders the
OpenAI answer. The server handler (server/embeddings.py) does all the IO. Nothing here may
import asyncio, aiohttp or anything else that does IO, reads a clock or logs.
"""
