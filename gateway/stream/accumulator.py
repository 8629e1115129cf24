"""The accumulator: routes every delta of a stream by identity and keeps the whole answer.

Sans-IO: fed canonical chunks (and, for the Responses API, its events), it returns chunks.
It must not import asyncio, aiohttp or anything that does IO, and reads no clock.

Identity rules, the reason this module exists:
- a tool-call delta belongs to the call with its `id`; without an id, to the call with its
  upstream `index`; never to "the most recent call";
- the OpenAI `index` a client sees is the count of tool calls started in this choice, kept
  here, whatever index the upstream used. This is the stream's one tool-call counter
  (DESIGN §1: the actor owns it, with the accumulator): translators never count calls,
  they pass on the upstream's identity of each (an id; Anthropic's and Bedrock's content-
  block index as `index`), so an OpenAI-compatible upstream's own numbering and a
  translated one are renumbered by the same code;
- each choice gets exactly one `finish_reason`, and it is `tool_calls` whenever the choice
  made tool calls;
- usage is recorded wherever it appears and leaves only in the final usage chunk.

`add()` returns the chunk unchanged (the same object) when it already obeys these rules, so
the caller can forward the upstream's own bytes; otherwise it returns a corrected copy, or
None when nothing of the chunk is left to send.
"""

from __future__ import annotations

from msgspec import UNSET
from msgspec.structs import replace

from gateway.errors import UpstreamProtocolError
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import Choice
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionCall
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import ResponseMessage
from gateway.wire.openai_chat import ToolCall
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage

_SEGMENT = 64


class Fragments(list[str]):
    """The text of one field as it arrived, every `_SEGMENT` fragments joined into one
    string: a long answer of 20-byte deltas holds one object per 64 of them, not 64 strings
    of ~70 bytes each (and each character is copied once more, never quadratically)."""

    __slots__ = ("_loose",)

    def __init__(self) -> None:
        super().__init__()
        self._loose = 0  # fragments appended since the last join

    def add(self, fragment: str) -> None:
        self.append(fragment)
        self._loose += 1
        if self._loose == _SEGMENT:
            self[-_SEGMENT:] = ["".join(self[-_SEGMENT:])]
            self._loose = 0


class ToolCallState:
    """One tool call as it builds up: identity, name and the argument fragments."""

    __slots__ = ("arguments", "id", "index", "item_id", "name", "upstream_index")

    def __init__(self, index: int, id: str | None, upstream_index: int | None) -> None:
        self.index = index
        self.id = id
        self.upstream_index = upstream_index
        self.item_id: str | None = None
        self.name = ""
        self.arguments = Fragments()

    def tool_call(self) -> ToolCall:
        return ToolCall(
            id=self.id or f"call_gw_{self.index}",
            function=FunctionCall(name=self.name, arguments="".join(self.arguments)),
        )


class ChoiceState:
    """Everything one choice has said so far."""

    __slots__ = (
        "by_id",
        "by_upstream_index",
        "calls",
        "content",
        "finish_reason",
        "logprobs",
        "reasoning",
        "refusal",
        "role",
    )

    def __init__(self) -> None:
        self.role = "assistant"
        self.content = Fragments()
        self.refusal: Fragments | None = None
        self.reasoning: Fragments | None = None
        self.calls: list[ToolCallState] = []
        self.by_id: dict[str, ToolCallState] = {}
        self.by_upstream_index: dict[int, ToolCallState] = {}
        self.finish_reason: str | None = None


class StreamAccumulator:
    """Accumulates one stream; `single_choice` folds every choice into choice 0 (n == 1)."""

    def __init__(self, *, single_choice: bool = True, id_seed: str = "gw") -> None:
        self.single_choice = single_choice
        self.id_seed = id_seed  # minted tool-call ids are call_<seed>_<index>
        self.choices: dict[int, ChoiceState] = {}
        self.usage: Usage | None = None
        self.usage_chunk: ChatChunk | None = None
        self.output_seen = False
        self.id = ""
        self.model = ""
        self.created = 0
        self._by_item: dict[str, ToolCallState] = {}

    # --- chat chunks ---------------------------------------------------------------------

    def add(self, chunk: ChatChunk) -> ChatChunk | None:
        """Record `chunk`; return what may be sent on (see module docstring)."""
        if not self.id:
            self.id, self.model, self.created = chunk.id, chunk.model, chunk.created
        usage = chunk.usage
        changed = False
        if usage is not UNSET and usage is not None:
            self.usage = usage
            if not chunk.choices:
                self.usage_chunk = chunk
                return None
            changed = True
        if not chunk.choices:
            return chunk
        out: list[ChunkChoice] = []
        for choice in chunk.choices:
            fixed = self._add_choice(choice)
            if fixed is not choice:
                changed = True
            if fixed is not None:
                out.append(fixed)
        if not changed:
            return chunk
        if not out:
            return None
        return replace(chunk, choices=out, usage=UNSET)

    def _add_choice(self, choice: ChunkChoice) -> ChunkChoice | None:
        index = 0 if self.single_choice else choice.index
        state = self.choices.get(index)
        if state is None:
            state = self.choices[index] = ChoiceState()
        delta = choice.delta
        new_delta = delta
        if delta.role:
            state.role = delta.role
        content = delta.content
        if content:
            state.content.add(content)
            self.output_seen = True
        if delta.refusal:
            if state.refusal is None:
                state.refusal = Fragments()
            state.refusal.add(delta.refusal)
            self.output_seen = True
        if delta.reasoning_content:
            if state.reasoning is None:
                state.reasoning = Fragments()
            state.reasoning.add(delta.reasoning_content)
        tool_calls = delta.tool_calls
        if tool_calls:
            self.output_seen = True
            fixed_calls = [self._add_tool_delta(state, tc) for tc in tool_calls]
            if any(f is not t for f, t in zip(fixed_calls, tool_calls, strict=True)):
                new_delta = replace(delta, tool_calls=fixed_calls)
        reason = choice.finish_reason
        new_reason = reason
        if reason is not UNSET and reason is not None:
            if state.finish_reason is not None:
                new_reason = UNSET  # a second finish for this choice: never forwarded
            else:
                state.finish_reason = "tool_calls" if state.calls else reason
                new_reason = state.finish_reason
        if new_delta is delta and new_reason == reason and index == choice.index:
            return choice
        if new_reason is UNSET and delta_is_empty(new_delta):
            return None
        return replace(choice, index=index, delta=new_delta, finish_reason=new_reason)

    def _add_tool_delta(self, state: ChoiceState, tc: ToolCallDelta) -> ToolCallDelta:
        call_id = tc.id or None
        upstream_index = tc.index if tc.index is not UNSET else None
        call = None
        if call_id is not None:
            call = state.by_id.get(call_id)
        if call is None and upstream_index is not None and call_id is None:
            call = state.by_upstream_index.get(upstream_index)
        if call is None and call_id is None and upstream_index is None:
            if len(state.calls) != 1:
                raise UpstreamProtocolError(
                    "a tool-call delta carries neither an id nor an index", retryable=True
                )
            call = state.calls[0]
        fn = tc.function
        name = fn.name if fn is not UNSET else UNSET
        args = fn.arguments if fn is not UNSET else UNSET
        if call is None:
            call = ToolCallState(len(state.calls), call_id, upstream_index)
            state.calls.append(call)
            if call_id is not None:
                state.by_id[call_id] = call
            if upstream_index is not None:
                state.by_upstream_index.setdefault(upstream_index, call)
            if name:
                call.name = name
            if args:
                call.arguments.add(args)
            if call_id is not None and tc.type == "function" and call.index == upstream_index:
                return tc
            if call.id is None:
                call.id = f"call_{self.id_seed}_{call.index}"
            return ToolCallDelta(
                index=call.index,
                id=call.id,
                type="function",
                function=FunctionDelta(name=call.name, arguments=args or ""),
            )
        if args:
            call.arguments.add(args)
        if upstream_index is not None and upstream_index not in state.by_upstream_index:
            state.by_upstream_index[upstream_index] = call
        repeats_identity = tc.id is not UNSET or tc.type is not UNSET or name is not UNSET
        if not repeats_identity and upstream_index == call.index:
            return tc
        if name and not call.name:
            call.name = name  # some servers send the name after the id; keep it once
            return ToolCallDelta(
                index=call.index, function=FunctionDelta(name=name, arguments=args or "")
            )
        return ToolCallDelta(index=call.index, function=FunctionDelta(arguments=args or ""))

    # --- Responses API events (routed by item_id) ----------------------------------------

    def responses_call_added(
        self, item_id: str, call_id: str, name: str, arguments: str = ""
    ) -> int:
        """A `function_call` output item started; returns its tool-call index."""
        state = self._choice0()
        call = ToolCallState(len(state.calls), call_id or None, None)
        call.item_id = item_id
        call.name = name
        if arguments:
            call.arguments.add(arguments)
        state.calls.append(call)
        if call_id:
            state.by_id[call_id] = call
        self._by_item[item_id] = call
        self.output_seen = True
        return call.index

    def responses_arguments_delta(self, item_id: str, delta: str) -> int:
        """Arguments for the call whose output item is `item_id`; returns its tool-call index."""
        call = self._by_item.get(item_id)
        if call is None:
            raise UpstreamProtocolError(f"arguments for unknown item {item_id!r}", retryable=True)
        call.arguments.add(delta)
        return call.index

    def responses_text_delta(self, delta: str) -> None:
        if delta:
            self._choice0().content.add(delta)
            self.output_seen = True

    def responses_finish(self, reason: str, usage: Usage | None) -> str:
        """The response ended; returns the chat finish_reason it maps to."""
        state = self._choice0()
        if state.calls:
            reason = "tool_calls"
        state.finish_reason = reason
        if usage is not None:
            self.usage = usage
        return reason

    def _choice0(self) -> ChoiceState:
        state = self.choices.get(0)
        if state is None:
            state = self.choices[0] = ChoiceState()
        return state

    # --- results ---------------------------------------------------------------------------

    def unfinished_choices(self) -> list[int]:
        return [i for i, c in sorted(self.choices.items()) if c.finish_reason is None]

    def finish_missing(self, reason: str = "stop") -> list[ChunkChoice]:
        """Finish every choice that has none yet (an upstream that ended without saying why)."""
        out = []
        for i in self.unfinished_choices():
            state = self.choices[i]
            state.finish_reason = "tool_calls" if state.calls else reason
            out.append(ChunkChoice(index=i, delta=Delta(), finish_reason=state.finish_reason))
        return out

    def message(self, index: int = 0) -> ResponseMessage:
        state = self.choices.get(index) or ChoiceState()
        content = "".join(state.content)
        message = ResponseMessage(role=state.role or "assistant")
        if state.content or not state.calls:
            message.content = content
        if state.refusal is not None:
            message.refusal = "".join(state.refusal)
        if state.reasoning is not None:
            message.reasoning_content = "".join(state.reasoning)
        if state.calls:
            message.tool_calls = [c.tool_call() for c in state.calls]
        return message

    def completion(self, *, id: str, model: str, created: int) -> ChatCompletion:
        """The whole answer as one non-streaming `chat.completion`."""
        indexes = sorted(self.choices) or [0]
        choices = [
            Choice(
                index=i,
                message=self.message(i),
                finish_reason=(self.choices[i].finish_reason if i in self.choices else "stop"),
            )
            for i in indexes
        ]
        result = ChatCompletion(id=id, created=created, model=model, choices=choices)
        if self.usage is not None:
            result.usage = self.usage
        return result


def delta_is_empty(delta: Delta) -> bool:
    return (
        delta.role is UNSET
        and delta.content is UNSET
        and delta.refusal is UNSET
        and delta.reasoning_content is UNSET
        and delta.tool_calls is UNSET
    )
