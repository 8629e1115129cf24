"""Tool calls for models that take no `tools` parameter: the answer side.

`EmulatedToolCalls` wraps any provider's stream translator. Each choice's content runs
through an `EnvelopeScanner`: prose goes on as content, each envelope comes out as proper
tool-call deltas (one delta per call, whole, with a gateway-made id), in the order the model
wrote them. The accumulator downstream sees ordinary tool calls, so the finish reason becomes
`tool_calls` and the indexes are counted as for any provider. Sans-IO.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET
from msgspec.structs import replace

from gateway.emulation.envelope import EmulatedCall
from gateway.emulation.envelope import EnvelopeScanner
from gateway.emulation.envelope import Piece
from gateway.emulation.request import ToolEmulation
from gateway.providers.base import StreamTranslator
from gateway.providers.base import Translated
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import ToolCallDelta


class EmulatedToolCalls:
    """A `StreamTranslator` that turns envelopes in the wrapped translator's text into calls."""

    def __init__(self, inner: StreamTranslator, emulation: ToolEmulation, id_seed: str) -> None:
        self._inner = inner
        self._names = emulation.names
        self._id_seed = id_seed
        self._scanners: dict[int, EnvelopeScanner] = {}
        self._minted = 0
        self._last: ChatChunk | None = None  # the template for chunks made at close
        self.done = False

    def feed(self, frame: Any) -> list[Translated]:
        out = self._filter(self._inner.feed(frame))
        self.done = self._inner.done
        return out

    def close(self) -> list[Translated]:
        out = self._filter(self._inner.close())
        self.done = self._inner.done
        if self._last is not None:
            for index in sorted(self._scanners):
                # an upstream that ended without finishing: its held text is still text
                pieces = self._scanners.pop(index).close()
                out.extend(self._chunks(self._last, index, pieces))
        return out

    def _filter(self, items: list[Translated]) -> list[Translated]:
        out: list[Translated] = []
        for item in items:
            chunk = item.chunk
            if not chunk.choices:
                out.append(item)
                continue
            self._last = chunk
            made: list[ChunkChoice] = []
            changed = False
            for choice in chunk.choices:
                fixed = self._choice(choice)
                if len(fixed) != 1 or fixed[0] is not choice:
                    changed = True
                made.extend(fixed)
            if not changed:
                out.append(item)
                continue
            last = len(made) - 1
            for i, choice in enumerate(made):
                usage = chunk.usage if i == last else UNSET
                out.append(Translated(replace(chunk, choices=[choice], usage=usage)))
            if not made and chunk.usage is not UNSET:
                out.append(Translated(replace(chunk, choices=[])))
        return out

    def _choice(self, choice: ChunkChoice) -> list[ChunkChoice]:
        """The choices `choice` becomes: itself when its text holds no envelope."""
        delta = choice.delta
        content = delta.content
        finished = choice.finish_reason is not UNSET and choice.finish_reason is not None
        if not content and not finished:
            return [choice]
        scanner = self._scanners.get(choice.index)
        if scanner is None:
            scanner = self._scanners[choice.index] = EnvelopeScanner(self._names)
        pieces = scanner.feed(content) if content else []
        if finished:
            pieces += scanner.close()
            del self._scanners[choice.index]
        if not finished and pieces == [content]:
            return [choice]
        if finished and (pieces == [content] or (not pieces and not content)):
            return [choice]
        first_text = pieces.pop(0) if pieces and isinstance(pieces[0], str) else None
        base = replace(delta, content=first_text if first_text is not None else UNSET)
        out = [replace(choice, delta=base, finish_reason=UNSET)]
        out += [ChunkChoice(index=choice.index, delta=self._delta(p)) for p in pieces]
        if _is_empty(out[0]) and len(out) > 1:
            out.pop(0)
        if finished:
            out[-1] = replace(out[-1], finish_reason=choice.finish_reason)
        return out

    def _chunks(self, template: ChatChunk, index: int, pieces: list[Piece]) -> list[Translated]:
        return [
            Translated(
                replace(
                    template,
                    choices=[ChunkChoice(index=index, delta=self._delta(p))],
                    usage=UNSET,
                )
            )
            for p in pieces
        ]

    def _delta(self, piece: Piece) -> Delta:
        if isinstance(piece, str):
            return Delta(content=piece)
        return Delta(tool_calls=[self._call(piece)])

    def _call(self, call: EmulatedCall) -> ToolCallDelta:
        self._minted += 1
        return ToolCallDelta(
            id=f"call_{self._id_seed}_e{self._minted}",
            type="function",
            function=FunctionDelta(name=call.name, arguments=call.arguments),
        )


def _is_empty(choice: ChunkChoice) -> bool:
    d = choice.delta
    return (
        choice.logprobs is UNSET
        and d.role is UNSET
        and d.content is UNSET
        and d.refusal is UNSET
        and d.reasoning_content is UNSET
        and d.tool_calls is UNSET
    )
