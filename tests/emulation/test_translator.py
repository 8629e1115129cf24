"""The answer side of emulation, between any provider's translator and the accumulator."""

from __future__ import annotations

import json
from typing import Any

from gateway.emulation.request import ToolEmulation
from gateway.emulation.translator import EmulatedToolCalls
from gateway.providers.base import Translated
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import Usage

ENVELOPE = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'


class ScriptedTranslator:
    """A provider translator stand-in: each frame is (choice index, content, finish)."""

    def __init__(self) -> None:
        self.done = False

    def feed(self, frame: Any) -> list[Translated]:
        if frame == "usage":
            return [Translated(ChatChunk(id="x", usage=Usage(1, 2, 3)))]
        index, content, finish = frame
        delta = Delta(content=content) if content is not None else Delta()
        choice = ChunkChoice(index=index, delta=delta, finish_reason=finish)
        if finish:
            self.done = True
        return [Translated(ChatChunk(id="x", choices=[choice]), raw=b"raw")]

    def close(self) -> list[Translated]:
        return []


def run(frames: list[Any], single_choice: bool = True) -> tuple[list[Translated], Any]:
    translator = EmulatedToolCalls(
        ScriptedTranslator(), ToolEmulation(frozenset({"get_weather"})), "seed"
    )
    acc = StreamAccumulator(single_choice=single_choice)
    out: list[Translated] = []
    for frame in frames:
        out += translator.feed(frame)
    out += translator.close()
    for item in out:
        acc.add(item.chunk)
    return out, acc


def pieces(text: str, size: int = 3) -> list[Any]:
    return [(0, text[i : i + size], None) for i in range(0, len(text), size)]


def test_prose_chunks_pass_through_as_the_same_objects() -> None:
    frames = [(0, "Hello", None), (0, " world", None), (0, None, "stop")]
    out, acc = run(frames)
    assert [item.raw for item in out] == [b"raw"] * 3  # upstream bytes still forwardable
    assert acc.message().content == "Hello world"


def test_envelope_split_in_pieces_becomes_one_call_and_finish_tool_calls() -> None:
    out, acc = run([*pieces("Checking. " + ENVELOPE), (0, None, "stop")])
    message = acc.message()
    assert message.content == "Checking."
    (call,) = message.tool_calls
    assert call.id == "call_seed_e1"
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        {"city": "Paris"},
    )
    assert acc.choices[0].finish_reason == "tool_calls"
    finishes = [c.finish_reason for i in out for c in i.chunk.choices if c.finish_reason]
    assert finishes == ["stop"]  # one finish; the accumulator names it tool_calls


def test_held_text_is_flushed_before_the_finish_and_at_close() -> None:
    _, acc = run([(0, 'Maybe {"name', None), (0, None, "length")])
    assert acc.message().content == 'Maybe {"name'
    assert acc.choices[0].finish_reason == "length"
    _, acc = run([(0, "Cut off {", None)])  # the upstream never finished
    assert acc.message().content == "Cut off {"


def test_choices_are_scanned_apart() -> None:
    frames = [
        (0, '{"name": "get_wea', None),
        (1, "Plain {", None),
        (0, 'ther", "arguments": {}}', None),
        (1, "text}", None),
        (0, None, "stop"),
        (1, None, "stop"),
        "usage",
    ]
    out, acc = run(frames, single_choice=False)
    assert acc.message(0).tool_calls[0].function.name == "get_weather"
    assert acc.message(1).content == "Plain {text}"
    assert acc.usage == Usage(1, 2, 3)
    assert out[-1].chunk.usage == Usage(1, 2, 3)
