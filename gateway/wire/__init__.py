"""Wire formats as msgspec Structs: pure data, no IO. Must not import asyncio or aiohttp."""

import msgspec

DECODE_ERRORS = (msgspec.DecodeError, RecursionError)
"""What decoding JSON from outside may raise: `DecodeError` (malformed; `ValidationError`,
a wrong type, is one) and `RecursionError` (nested past the parser's depth limit, which
msgspec raises as it is, not as a DecodeError). Catch both wherever the bytes are not ours."""
