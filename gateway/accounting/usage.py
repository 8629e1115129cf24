"""Token counts the gateway has to estimate: the prompt of a reservation, the output cap of a
request without one, and the output of a stream that was cut off before its usage came.

The estimate is about four characters per token (English text and code under the common
BPE tokenizers); it is only used where no upstream count exists, and every record built
from it is marked estimated.
"""

from __future__ import annotations

from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Usage

CHARS_PER_TOKEN = 4
# What a reservation assumes a request without max_tokens / max_completion_tokens (or
# max_output_tokens) may produce; such a request may cost more than it reserved.
DEFAULT_OUTPUT_CAP = 4096


def tokens_of_chars(chars: int) -> int:
    return -(-max(chars, 0) // CHARS_PER_TOKEN)


def output_cap(chat: ChatRequest) -> int:
    """The most output tokens the request allows: its max tokens (DEFAULT_OUTPUT_CAP when it
    sets none) for each of its `n` choices, since every choice is billed."""
    cap = DEFAULT_OUTPUT_CAP
    for value in (chat.max_completion_tokens, chat.max_tokens):
        if isinstance(value, int) and value > 0:
            cap = value
            break
    n = chat.n
    if isinstance(n, int) and n > 1:
        return cap * n
    return cap


def streamed_chars(acc: StreamAccumulator) -> int:
    """Characters of output the accumulator holds: text, reasoning, refusals, tool calls."""
    total = 0
    for state in acc.choices.values():
        total += sum(map(len, state.content))
        total += sum(map(len, state.reasoning or ()))
        total += sum(map(len, state.refusal or ()))
        for call in state.calls:
            total += len(call.name) + sum(map(len, call.arguments))
    return total


def estimated_usage(acc: StreamAccumulator | None, prompt_tokens: int, text: str = "") -> Usage:
    """Usage for an answer without the upstream's count: what upstream usage arrived (a
    prompt count sent up front), else the prompt estimate; output from the streamed text."""
    output = tokens_of_chars((streamed_chars(acc) if acc is not None else 0) + len(text))
    known = acc.usage if acc is not None else None
    prompt = known.prompt_tokens if known is not None and known.prompt_tokens else prompt_tokens
    if known is not None:
        output = max(output, known.completion_tokens)
    return Usage(prompt_tokens=prompt, completion_tokens=output, total_tokens=prompt + output)
