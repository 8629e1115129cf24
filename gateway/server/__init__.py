"""The HTTP edge: aiohttp handlers, auth, error rendering, health, the process runner."""
