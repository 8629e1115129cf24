"""The parts of a provider translation that are the same for every provider, written once.

Sans-IO, like the translators that use it: no asyncio, aiohttp, logging or clock reads.

- `chat_finish`: the contract's finish rule (DESIGN §4), for streamed and non-streamed
  answers alike: `tool_calls` whenever the turn made tool calls, whatever the upstream's
  own word, and never `tool_calls` when it made none (a forced answer tool, or only
  server-side tools).
- `STOP_REASONS`: the stop words Anthropic's Messages API and Bedrock's Converse API share
  (Converse took them from Anthropic); each adds its own.
- `ChunkTranslator`: the chunk factory every stream translator uses.
- `ToolBlocks`: tool calls that are content blocks (Anthropic, Bedrock).
- `copy_sampling`: the sampling parameters the request builders copy from the chat request.
- `answer_message`, `one_choice`: a non-streamed answer as one `chat.completion`.
- `arguments_object`: a chat tool call's arguments for providers that take an object.
- `conversation`: system blocks and strict alternating turns (Anthropic, Bedrock).

Tool-call indexes: a translator never counts tool calls. It passes on the upstream's own
identity of a call (its id; Anthropic's and Bedrock's content-block index as the delta's
`index`; none for Gemini and Ollama, whose calls arrive whole) and the stream's
accumulator (`gateway/stream/accumulator.py`, owned by the actor) gives each call the
index the client sees: the count of calls started in the stream, kept in one place.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import TypeVar

import msgspec
from msgspec import UnsetType

from gateway.errors import BadRequest
from gateway.errors import UpstreamProtocolError
from gateway.providers.base import Translated
from gateway.providers.base import UpstreamCall
from gateway.wire import DECODE_ERRORS
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Choice
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionDefinition
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import Message
from gateway.wire.openai_chat import ResponseMessage
from gateway.wire.openai_chat import Tool
from gateway.wire.openai_chat import ToolCall
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage

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


class ChunkTranslator:
    """What every stream translator starts from: the stream's chunk id, `created` and model
    (a translator may learn the id and the model from the stream) and the chunk factory."""

    __slots__ = ("_created", "_id", "_model", "done")

    def __init__(self, *, id: str, created: int, model: str) -> None:
        self.done = False
        self._id = id
        self._created = created
        self._model = model

    def _chunk(self, delta: Delta, finish: str | None = None) -> Translated:
        """A chunk of choice 0 carrying `delta` (and the finish, when it is the last)."""
        choice = ChunkChoice(delta=delta, finish_reason=finish)
        return Translated(
            ChatChunk(id=self._id, created=self._created, model=self._model, choices=[choice])
        )

    def _usage_chunk(self, usage: Usage) -> Translated:
        """The usage chunk (no choices), which the accumulator holds for the stream's end."""
        return Translated(
            ChatChunk(id=self._id, created=self._created, model=self._model, usage=usage)
        )


class ToolBlocks:
    """The tool calls of a stream whose calls are content blocks (Anthropic's Messages,
    Bedrock's Converse): a call's start, its argument fragments routed by the block index,
    and `"{}"` at the block's stop when no fragment ever came (a call without arguments).

    The tool-call `index` in these deltas is the upstream's content-block index: the
    upstream's identity of the call, not the index the client sees. That one is counted by
    the stream's accumulator, the one tool-call counter of a stream (a text block before a
    call makes the block index 1; the client still sees 0)."""

    __slots__ = ("_answer", "_emitted", "_tools")

    def __init__(self) -> None:
        self._tools: set[int] = set()  # block indexes of client tool calls
        self._answer: set[int] = set()  # blocks of the forced answer tool: their input is text
        self._emitted: set[int] = set()  # blocks whose input had a non-empty fragment

    @property
    def made_calls(self) -> bool:
        return bool(self._tools)

    def __contains__(self, block: int) -> bool:
        """Whether `block` is a call of ours (or the answer tool), started."""
        return block in self._tools or block in self._answer

    def start(self, block: int, id: str, name: str) -> Delta:
        """A client tool call starting in content block `block`."""
        self._tools.add(block)
        call = ToolCallDelta(
            index=block, id=id, type="function", function=FunctionDelta(name=name, arguments="")
        )
        return Delta(tool_calls=[call])

    def start_answer(self, block: int) -> None:
        """A block of the forced answer tool: its input is the answer's content."""
        self._answer.add(block)

    def arguments(self, block: int, text: str) -> Delta | None:
        """A fragment of a block's input (None for a block that is not a call of ours:
        a server-side tool's input, or a block never started)."""
        if block in self._answer:
            self._emitted.add(block)
            return Delta(content=text)
        if block not in self._tools:
            return None
        self._emitted.add(block)
        call = ToolCallDelta(index=block, function=FunctionDelta(arguments=text))
        return Delta(tool_calls=[call])

    def stop(self, block: int) -> Delta | None:
        """The block ended: `"{}"` if it is a call whose input never came."""
        if block in self._emitted:
            return None
        return self.arguments(block, "{}")


def copy_sampling(request: ChatRequest, target: object, names: Mapping[str, str]) -> None:
    """Set on `target` (a provider's request or config Struct) every sampling parameter the
    chat request carries that `names` maps to a field there (chat name -> that field's
    name): `temperature`, `top_p`, `presence_penalty`, `frequency_penalty`, `seed`, and
    `stop`, which is always sent as a list. Absent and `null` are not copied; a parameter
    `names` leaves out is one the provider does not take."""
    for name, field in names.items():
        if name == "stop":
            stop = request.stop
            if isinstance(stop, str):
                value: Any = [stop]
            elif stop:
                value = list(stop)
            else:
                continue
        else:
            value = getattr(request, name)
            if value is None or value is UNSET:
                continue
        setattr(target, field, value)


# the chat sampling parameters Anthropic's Messages API and Bedrock's Converse API take,
# by their names for them (Converse's inferenceConfig took Messages' names)
MESSAGES_SAMPLING: Mapping[str, str] = {
    "temperature": "temperature",
    "top_p": "top_p",
    "stop": "stop_sequences",
}


def answer_message(
    texts: list[str], reasoning: list[str], calls: list[ToolCall]
) -> ResponseMessage:
    """The message of a non-streamed answer: its text (`null` when the answer is only tool
    calls, `""` when it is nothing at all), its reasoning and its calls."""
    message = ResponseMessage(content="".join(texts) if texts or not calls else None)
    if reasoning:
        message.reasoning_content = "".join(reasoning)
    if calls:
        message.tool_calls = calls
    return message


def one_choice(
    call: UpstreamCall,
    message: ResponseMessage,
    finish: str,
    usage: Usage | None,
    *,
    id: str | None = None,
    model: str | None = None,
    created: int | None = None,
) -> ChatCompletion:
    """A non-streamed answer as one `chat.completion` of one choice; the id, model and
    `created` are the upstream's where it gave them, else the call's."""
    completion = ChatCompletion(
        id=id or "chatcmpl-" + call.request_id,
        created=call.created if created is None else created,
        model=model or call.model,
        choices=[Choice(index=0, message=message, finish_reason=finish)],
    )
    if usage is not None:
        completion.usage = usage
    return completion


_json_decoder = msgspec.json.Decoder()


def arguments_object(arguments: str, param: str) -> dict[str, Any]:
    """A chat tool call's `arguments` (JSON text) as the object a provider that takes calls
    as objects wants (Gemini's `args`, Ollama's `arguments`); `""` is `{}`; anything but a
    JSON object is the client's error, at `param`."""
    if not arguments.strip():
        return {}
    try:
        args = _json_decoder.decode(arguments)
    except DECODE_ERRORS:
        raise BadRequest("tool call arguments are not valid JSON", param=param) from None
    if not isinstance(args, dict):
        raise BadRequest("tool call arguments must be a JSON object", param=param)
    return args


def conversation(
    messages: list[Message],
    provider: str,
    *,
    system: Callable[[Message, str], list[Any]],
    user: Callable[[Message, str], list[Any]],
    assistant: Callable[[Message, int, str], list[Any]],
    tool: Callable[[Message, int], Any],
) -> tuple[list[Any], list[tuple[str, list[Any]]]]:
    """A chat conversation as (system blocks, alternating turns) for the APIs that take the
    system prompt apart and strict user/assistant turns (Anthropic's Messages, Bedrock's
    Converse): system and developer messages go to the system blocks, a tool result is a
    user turn, consecutive turns of one role are merged, and an empty turn is dropped (those
    APIs reject it; dropping it keeps the rest valid). The callables make the provider's
    blocks of one message (`param` is where its content is, for errors)."""
    system_blocks: list[Any] = []
    turns: list[tuple[str, list[Any]]] = []
    for i, message in enumerate(messages):
        role = message.role
        param = f"messages[{i}].content"
        if role in ("system", "developer"):
            system_blocks.extend(system(message, param))
            continue
        if role == "user":
            role_out, blocks = "user", user(message, param)
        elif role == "assistant":
            role_out, blocks = "assistant", assistant(message, i, param)
        elif role == "tool":
            role_out, blocks = "user", [tool(message, i)]
        else:
            raise BadRequest(
                f"role {role!r} is not supported by the {provider} provider",
                param=f"messages[{i}].role",
            )
        if not blocks:
            continue
        if turns and turns[-1][0] == role_out:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role_out, blocks))
    return system_blocks, turns


def call_inputs(message: Message, i: int) -> list[tuple[ToolCall, dict[str, Any]]]:
    """Each tool call of the assistant message `messages[i]` with its arguments as the
    object the APIs that take a call's input as JSON (Anthropic's `tool_use`, Bedrock's
    `toolUse`) want; `""` is `{}`; anything but a JSON object is the client's error."""
    out = []
    for j, call in enumerate(message.tool_calls or []):
        arguments = call.function.arguments
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            raise BadRequest(
                "tool call arguments must be a JSON object",
                param=f"messages[{i}].tool_calls[{j}].function.arguments",
            )
        out.append((call, parsed))
    return out


def refuse_beyond_one_text_choice(request: ChatRequest, provider: str) -> None:
    """Refuse (400) what a provider that answers with one text choice cannot do: `n` > 1,
    log probabilities, audio output (Anthropic's Messages, Bedrock's Converse, Gemini,
    Ollama)."""
    if request.n not in (UNSET, None, 1):
        raise BadRequest(f"the {provider} provider answers one choice (n must be 1)", param="n")
    if request.logprobs is True:
        raise BadRequest(f"the {provider} provider has no logprobs", param="logprobs")
    if request.modalities not in (UNSET, None) and "audio" in (request.modalities or []):
        raise BadRequest(f"the {provider} provider has no audio output", param="modalities")


def function_tools(request: ChatRequest, provider: str) -> list[tuple[Tool, FunctionDefinition]]:
    """The request's tools, each with its function, for a provider that takes function tools
    only (400 for any other type); in the request's order."""
    out = []
    for i, tool in enumerate(request.tools or []):
        fn = tool.function
        if tool.type != "function" or fn is UNSET:
            raise BadRequest(
                f"tool type {tool.type!r} is not supported by the {provider} provider",
                param=f"tools[{i}].type",
            )
        out.append((tool, fn))
    return out


T = TypeVar("T")


def given(value: T | None) -> T | UnsetType:
    """`value`, or UNSET for None: a request field the builder left out is not sent."""
    return UNSET if value is None else value


def decoded_event(decoder: msgspec.json.Decoder[T], data: bytes, what: str = "event") -> T:
    """One upstream event's (or a whole answer's) JSON, or the protocol error that ends the
    attempt."""
    try:
        return decoder.decode(data)
    except DECODE_ERRORS as exc:
        raise UpstreamProtocolError(f"upstream sent a malformed {what}: {exc}") from None


B = TypeVar("B")


def content_blocks(
    content: Any,
    param: str,
    provider: str,
    text: Callable[[str], B],
    image: Callable[[Any, str], B] | None = None,
) -> list[tuple[B, dict[str, Any]]]:
    """A message's content as blocks of a provider that takes text (and, given `image`,
    image_url) parts: each block with the part it came from (empty texts dropped, any
    other part type a 400 naming it). A string is one text block."""
    if content is UNSET or content is None:
        return []
    if isinstance(content, str):
        return [(text(content), {})] if content else []
    out: list[tuple[B, dict[str, Any]]] = []
    for j, part in enumerate(content):
        kind = part.get("type")
        if kind in ("text", "refusal"):
            value = part.get(kind)
            if not isinstance(value, str):
                raise BadRequest(f"a {kind} part needs a string {kind!r}", param=f"{param}[{j}]")
            if value:
                out.append((text(value), part))
        elif kind == "image_url" and image is not None:
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            out.append((image(url, f"{param}[{j}].image_url"), part))
        else:
            raise BadRequest(
                f"content part type {kind!r} is not supported by the {provider} provider",
                param=f"{param}[{j}].type",
            )
    return out
