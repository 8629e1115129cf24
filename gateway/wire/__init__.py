"""Wire formats as msgspec Structs: pure data, no IO. Must not import asyncio or aiohttp."""
