"""The parts of a provider translation that are the same for every provider, written once.

Sans-IO, like the translators that use it: no asyncio, aiohttp, logging or clock reads.

- `chat_finish`: the contract's finish rule (DESIGN §4), for streamed and non-streamed
  answers alike: `tool_calls` whenever the turn made tool calls, whatever the upstream's
  own word, and never `tool_calls` when it made none (a forced answer tool, or only
  server-side tools).
- `STOP_REASONS`: the stop words Anthropic's Messages API and Bedrock's Converse API share
  (Converse took them from Anthropic); each adds its own.
"""

from __future__ import annotations

from collections.abc import Mapping

STOP_REASONS: Mapping[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}


def chat_finish(reason: str, made_calls: bool) -> str:
    """The chat finish_reason of a turn the upstream ended with `reason` (already in chat's
    words), by the contract: the calls decide `tool_calls`, not the upstream."""
    if made_calls:
        return "tool_calls"
    return "stop" if reason == "tool_calls" else reason


def mapped_finish(table: Mapping[str, str], word: str | None, made_calls: bool) -> str:
    """`chat_finish` of a provider's own stop word looked up in `table` (unknown: `stop`)."""
    return chat_finish(table.get(word or "", "stop"), made_calls)
