"""Incremental sans-IO decoders and encoders of byte streams (SSE). Must not import asyncio,
aiohttp, logging or anything that reads a clock."""
