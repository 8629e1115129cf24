"""Provider adapters: request builders, stream translators, error mapping. Sans-IO: must
not import asyncio or aiohttp; the actor does the IO."""
