"""Continuation after content: a stream that broke after its client received part of the
answer goes on at another target, which is sent the request plus the text already sent as
the start of its answer (a trailing assistant turn), and whose answer is joined on. Sans-IO.

What can be continued (`continuable`): a single-choice answer in text or reasoning, with no
tool call started and no refusal. No provider takes a prefilled tool call without its
result, so a break after a call ends as it always did (the calls the client received
stand, then an error event). The join (`JoinedTranslator`) makes the continuation's chunks
part of the one stream: no second role, the first attempt's id, model and created, and
(the accumulator is the same) the tool-call count and the one finish go on. A prefill's
trailing whitespace is cut (Anthropic refuses it) and the same whitespace at the
continuation's start is dropped, so nothing is doubled; reasoning the client already had
part of is not sent again. Each broken attempt's usage (the upstream's, else an estimate
from what it streamed) is added to the answering attempt's: the usage chunk is the sum.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET
from msgspec.structs import replace

from gateway.accounting.usage import tokens_of_chars
from gateway.errors import UpstreamError
from gateway.providers.base import CONTINUE_FINAL_MESSAGE
from gateway.providers.base import PREFILL
from gateway.providers.base import PREFIX
from gateway.providers.base import StreamTranslator
from gateway.providers.base import Translated
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.accumulator import delta_is_empty
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import CompletionTokensDetails
from gateway.wire.openai_chat import Message
from gateway.wire.openai_chat import PromptTokensDetails
from gateway.wire.openai_chat import Usage


def continuable(acc: StreamAccumulator) -> bool:
    """True when the answer so far can be the start of another target's answer."""
    if not acc.single_choice or len(acc.choices) != 1:
        return False
    state = acc.choices.get(0)
    return state is not None and not state.calls and state.refusal is None


def streamed_text(acc: StreamAccumulator) -> str:
    state = acc.choices.get(0)
    return "".join(state.content) if state is not None else ""


def add_usage(a: Usage | None, b: Usage | None) -> Usage | None:
    """The two counts summed (either may be missing)."""
    if a is None or b is None:
        return a if b is None else b
    usage = Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        total_tokens=(a.total_tokens or a.prompt_tokens + a.completion_tokens)
        + (b.total_tokens or b.prompt_tokens + b.completion_tokens),
    )
    cached = _detail(a.prompt_tokens_details, "cached_tokens") + _detail(
        b.prompt_tokens_details, "cached_tokens"
    )
    if cached:
        usage.prompt_tokens_details = PromptTokensDetails(cached_tokens=cached)
    reasoning = _detail(a.completion_tokens_details, "reasoning_tokens") + _detail(
        b.completion_tokens_details, "reasoning_tokens"
    )
    if reasoning:
        usage.completion_tokens_details = CompletionTokensDetails(reasoning_tokens=reasoning)
    return usage


def _detail(details: Any, field: str) -> int:
    value = getattr(details, field, None) if details not in (None, UNSET) else None
    return value if isinstance(value, int) else 0


class Continuation:
    """What a broken stream had said, for the attempts that continue it."""

    __slots__ = ("breaks", "created", "error", "estimated", "id", "model", "reasoned", "text")

    def __init__(self, acc: StreamAccumulator, error: UpstreamError) -> None:
        self.id, self.model, self.created = acc.id, acc.model, acc.created
        self.breaks = 0
        self.estimated = False  # some broken attempt's usage is an estimate
        self.error = error  # the first break's: what the client gets if none continues it
        self.text = ""
        self.reasoned = False
        self.broke(acc)

    def broke(self, acc: StreamAccumulator) -> None:
        """The stream (first or continued) broke again with `acc` as it stands."""
        self.breaks += 1
        self.text = streamed_text(acc)
        state = acc.choices.get(0)
        self.reasoned = state is not None and state.reasoning is not None

    def prefill(self, mode: str) -> tuple[str, str]:
        """The answer's start as `mode` takes it, and what was cut from its end."""
        if mode == PREFILL:
            kept = self.text.rstrip()
            return kept, self.text[len(kept) :]
        return self.text, ""

    def request(
        self, request: ChatRequest, body: dict[str, Any], mode: str
    ) -> tuple[ChatRequest, dict[str, Any]]:
        """The client's request (typed, and as JSON) with the answer so far as its last,
        assistant turn, and its output cap less what was already sent."""
        text, _ = self.prefill(mode)
        body = dict(body)
        messages = list(request.messages)
        if text:
            turns = list(body.get("messages", ()))
            last = messages[-1] if messages else None
            if (
                last is not None
                and last.role == "assistant"
                and isinstance(last.content, str)
                and turns
                and isinstance(turns[-1], dict)
                and isinstance(turns[-1].get("content"), str)
            ):
                # the client's own prefill: the answer went on from it, so one turn holds
                # both (a second assistant turn would read as a finished one)
                text = last.content + text
                messages[-1] = replace(last, content=text)
                turn: dict[str, Any] = {**turns.pop(), "content": text}
            else:
                messages.append(Message(role="assistant", content=text))
                turn = {"role": "assistant", "content": text}
            if mode == PREFIX:
                turn["prefix"] = True
            body["messages"] = [*turns, turn]
            if mode == CONTINUE_FINAL_MESSAGE:
                body["continue_final_message"] = True
                body["add_generation_prompt"] = False
        changes: dict[str, Any] = {"messages": messages}
        sent = tokens_of_chars(len(self.text))
        for field in ("max_completion_tokens", "max_tokens"):
            cap = getattr(request, field)
            if isinstance(cap, int) and cap > 0:
                changes[field] = body[field] = max(cap - sent, 1)
        return replace(request, **changes), body

    def translator(self, inner: StreamTranslator, mode: str) -> JoinedTranslator:
        return JoinedTranslator(inner, self, self.prefill(mode)[1])


class JoinedTranslator:
    """A continuing attempt's translator, its chunks made part of the broken stream.
    `joined` turns true once any of its output is for the client (before that, its failure
    is one more attempt, not another break)."""

    __slots__ = ("_cut", "_inner", "_reasoned", "_stamp", "joined")

    def __init__(self, inner: StreamTranslator, continuation: Continuation, cut: str) -> None:
        self._inner = inner
        self._cut = cut  # whitespace cut from the prefill: dropped from the answer's start
        self._reasoned = continuation.reasoned
        self._stamp = {
            "id": continuation.id,
            "model": continuation.model,
            "created": continuation.created,
        }
        self.joined = False

    @property
    def done(self) -> bool:
        return self._inner.done

    @done.setter
    def done(self, value: bool) -> None:
        self._inner.done = value

    def feed(self, frame: Any) -> list[Translated]:
        return self._join(self._inner.feed(frame))

    def close(self) -> list[Translated]:
        return self._join(self._inner.close())

    def _join(self, items: list[Translated]) -> list[Translated]:
        out = []
        for item in items:
            chunk = self._chunk(item.chunk)
            if chunk is not None:
                out.append(Translated(chunk))
        return out

    def _chunk(self, chunk: ChatChunk) -> ChatChunk | None:
        choices = []
        for choice in chunk.choices:
            kept = self._choice(choice)
            if kept is not None:
                choices.append(kept)
        if chunk.choices and not choices and chunk.usage in (UNSET, None):
            return None
        return replace(chunk, choices=choices, **self._stamp)

    def _choice(self, choice: ChunkChoice) -> ChunkChoice | None:
        delta = choice.delta
        changes: dict[str, Any] = {}
        if delta.role is not UNSET:
            changes["role"] = UNSET  # the stream has its role already
        if self._reasoned and delta.reasoning_content is not UNSET:
            changes["reasoning_content"] = UNSET  # the client has (part of) the reasoning
        content = delta.content
        if isinstance(content, str):
            trimmed = self._trimmed(content) if self._cut else content
            if trimmed != content or not content:
                changes["content"] = trimmed or UNSET
            if trimmed:
                self.joined = True
        if delta.tool_calls or (delta.reasoning_content and not self._reasoned):
            self.joined = True
        if delta.refusal:
            self.joined = True
        if changes:
            delta = replace(delta, **changes)
        finish = choice.finish_reason
        if delta_is_empty(delta) and finish in (UNSET, None):
            return None
        return replace(choice, delta=delta) if changes else choice

    def _trimmed(self, content: str) -> str:
        """`content` without the start that repeats the whitespace cut from the prefill."""
        cut = self._cut
        if content.startswith(cut):
            self._cut = ""
            return content[len(cut) :]
        if cut.startswith(content):
            self._cut = cut[len(content) :]  # all of it repeats the cut; more may follow
            return ""
        shared = 0
        while shared < len(content) and content[shared] == cut[shared]:
            shared += 1
        self._cut = ""
        return content[shared:]
