"""Canonical chat request -> Anthropic Messages request, sans-IO.

docs/providers.md lists every request field and whether it is translated, ignored (and why)
or rejected with a 400; keep the two in step. The rules that shape this module:

- Anthropic takes the system prompt apart (`system`) and wants user and assistant turns to
  alternate, so system and developer messages move to `system`, tool results become
  `tool_result` blocks of a user turn, and consecutive turns of one role are merged.
- Anthropic rejects empty text blocks. A `""` text (user, assistant, system or a text part)
  is dropped, never sent and never turned into `null`; a turn left with no block at all is
  dropped (its neighbours then merge). A `""` tool result is sent without a `content` key,
  which Anthropic reads as an empty result.
- `cache_control` (prompt caching) is read from content parts, system parts and
  `CacheControlledTool`s, which only the Anthropic Messages inbound API makes; it is carried
  onto the matching blocks and tools.
- `response_format` json_schema / json_object is served with a forced tool whose input is
  the answer (`answer_tool`); the translator turns that tool's input back into content.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.errors import BadRequest
from gateway.providers.base import UpstreamCall
from gateway.providers.translate import MESSAGES_SAMPLING
from gateway.providers.translate import call_inputs
from gateway.providers.translate import content_blocks
from gateway.providers.translate import conversation
from gateway.providers.translate import copy_sampling
from gateway.providers.translate import function_tools
from gateway.providers.translate import refuse_beyond_one_text_choice
from gateway.wire.anthropic import Block
from gateway.wire.anthropic import CacheControlledTool
from gateway.wire.anthropic import ImageBlock
from gateway.wire.anthropic import ImageSource
from gateway.wire.anthropic import MessageParam
from gateway.wire.anthropic import MessagesRequest
from gateway.wire.anthropic import Metadata
from gateway.wire.anthropic import TextBlock
from gateway.wire.anthropic import Thinking
from gateway.wire.anthropic import ToolChoice
from gateway.wire.anthropic import ToolParam
from gateway.wire.anthropic import ToolResultBlock
from gateway.wire.anthropic import ToolUseBlock
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Message

DEFAULT_MAX_TOKENS = 4096  # models this table does not know
# Anthropic requires max_tokens; without the client's, each model's own output limit is used
# (its documented maximum), so answers are not cut short by a gateway default. Longest
# prefix first.
MODEL_MAX_TOKENS: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-5", 64000),
    ("claude-opus-4-1", 32000),
    ("claude-opus-4", 32000),
    ("claude-sonnet-4", 64000),
    ("claude-haiku-4", 64000),
    ("claude-3-7-sonnet", 64000),
    ("claude-3-5-sonnet", 8192),
    ("claude-3-5-haiku", 8192),
    ("claude-3-opus", 4096),
    ("claude-3-haiku", 4096),
)


def default_max_tokens(model: str) -> int:
    """The output limit of `model` (a Bedrock- or Vertex-style prefix is tolerated)."""
    name = model.rsplit("/", 1)[-1].removeprefix("anthropic.").removeprefix("us.anthropic.")
    for prefix, limit in MODEL_MAX_TOKENS:
        if name.startswith(prefix):
            return limit
    return DEFAULT_MAX_TOKENS


THINKING_BUDGETS = {"minimal": 1024, "low": 1024, "medium": 4096, "high": 16384}
MIN_THINKING_BUDGET = 1024
JSON_OBJECT_TOOL = "json_response"
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def answer_tool(request: ChatRequest) -> str | None:
    """The name of the forced tool that carries a structured answer, if one is used."""
    fmt = request.response_format
    if not isinstance(fmt, dict):
        return None
    kind = fmt.get("type")
    if kind == "json_object":
        return JSON_OBJECT_TOOL
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        name = spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(name, str) or not name:
            raise BadRequest(
                "response_format.json_schema.name is required", param="response_format"
            )
        return name
    if kind in (None, "text"):
        return None
    raise BadRequest(f"unsupported response_format type {kind!r}", param="response_format")


# --- messages --------------------------------------------------------------------------------


def _image(url: Any, param: str) -> ImageBlock:
    if not isinstance(url, str):
        raise BadRequest("image_url.url must be a string", param=param)
    if url.startswith(("http://", "https://")):
        return ImageBlock(source=ImageSource(type="url", url=url))
    if url.startswith("data:"):
        header, sep, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if sep and encoding == "base64" and media_type:
            return ImageBlock(source=ImageSource(type="base64", media_type=media_type, data=data))
    raise BadRequest("image_url.url must be an http(s) URL or a base64 data: URL", param=param)


def _parts(content: Any, param: str, *, images: bool) -> list[TextBlock | ImageBlock]:
    """Text (and image) blocks of a message's content; empty texts are dropped."""
    out: list[TextBlock | ImageBlock] = []
    text: Callable[[str], TextBlock | ImageBlock] = _text_block
    for block, part in content_blocks(
        content, param, "anthropic", text, _image if images else None
    ):
        cache_control = part.get("cache_control")
        if isinstance(cache_control, dict):
            block.cache_control = cache_control  # set only by the Messages inbound API
        out.append(block)
    return out


def _text_block(text: str) -> TextBlock:
    return TextBlock(text=text)


def _tool_uses(message: Message, i: int) -> list[Block]:
    return [
        ToolUseBlock(id=call.id, name=call.function.name, input=parsed)
        for call, parsed in call_inputs(message, i)
    ]


def _tool_result(message: Message, i: int) -> ToolResultBlock:
    if message.tool_call_id is UNSET:
        raise BadRequest("a tool message needs tool_call_id", param=f"messages[{i}].tool_call_id")
    block = ToolResultBlock(tool_use_id=message.tool_call_id)
    content = message.content
    if isinstance(content, str):
        if content:
            block.content = content
    elif content is not UNSET and content is not None:
        parts = _parts(content, f"messages[{i}].content", images=True)
        if parts:
            block.content = parts
    return block


def translate_messages(messages: list[Message]) -> tuple[list[TextBlock], list[MessageParam]]:
    """(system blocks, alternating turns) for a chat conversation."""
    system, turns = conversation(
        messages,
        "anthropic",
        system=lambda m, param: [
            b for b in _parts(m.content, param, images=False) if isinstance(b, TextBlock)
        ],
        user=lambda m, param: list(_parts(m.content, param, images=True)),
        assistant=lambda m, i, param: [
            *_parts(m.content, param, images=False),
            *_tool_uses(m, i),
        ],
        tool=_tool_result,
    )
    return system, [MessageParam(role=role, content=blocks) for role, blocks in turns]


# --- everything else -------------------------------------------------------------------------


def _tools(request: ChatRequest) -> list[ToolParam]:
    out = []
    for tool, fn in function_tools(request, "anthropic"):
        schema = fn.parameters if fn.parameters is not UNSET else _EMPTY_SCHEMA
        param = ToolParam(name=fn.name, input_schema=schema, description=fn.description)
        if isinstance(tool, CacheControlledTool):
            param.cache_control = tool.cache_control
        out.append(param)
    return out


def _tool_choice(request: ChatRequest) -> ToolChoice | None:
    choice = request.tool_choice
    if choice is UNSET or choice is None or choice == "auto":
        result = ToolChoice(type="auto")
    elif choice == "none":
        return ToolChoice(type="none")
    elif choice == "required":
        result = ToolChoice(type="any")
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if not isinstance(name, str):
            raise BadRequest("tool_choice.function.name must be a string", param="tool_choice")
        result = ToolChoice(type="tool", name=name)
    else:
        raise BadRequest(f"unsupported tool_choice {choice!r}", param="tool_choice")
    if request.parallel_tool_calls is False:
        result.disable_parallel_tool_use = True
    elif choice is UNSET or choice is None:
        return None  # nothing to say: Anthropic's default is auto
    return result


def _reject_unsupported(request: ChatRequest) -> None:
    refuse_beyond_one_text_choice(request, "anthropic")


def _thinking(request: ChatRequest, max_tokens: int, explicit: bool) -> tuple[Thinking, int]:
    effort = request.reasoning_effort
    budget = THINKING_BUDGETS.get(effort) if isinstance(effort, str) else None
    if budget is None:
        raise BadRequest(f"unsupported reasoning_effort {effort!r}", param="reasoning_effort")
    if not explicit:
        # the model's own limit already leaves room for the budget and an answer
        return Thinking(budget_tokens=budget), max(max_tokens, budget + DEFAULT_MAX_TOKENS)
    budget = min(budget, max_tokens - 1)  # Anthropic wants max_tokens > budget_tokens
    if budget < MIN_THINKING_BUDGET:
        raise BadRequest(
            f"reasoning needs max_tokens above {MIN_THINKING_BUDGET} on the anthropic provider",
            param="max_tokens",
        )
    return Thinking(budget_tokens=budget), max_tokens


def build_messages_request(call: UpstreamCall) -> MessagesRequest:
    """The Messages request for one upstream call (see the module docstring)."""
    request = call.request
    _reject_unsupported(request)
    system, turns = translate_messages(request.messages)
    limit = request.max_completion_tokens
    if limit is UNSET or limit is None:
        limit = request.max_tokens
    explicit = isinstance(limit, int)
    max_tokens = limit if isinstance(limit, int) else default_max_tokens(call.model)
    body = MessagesRequest(model=call.model, max_tokens=max_tokens, messages=turns)
    if system:
        body.system = system
    if call.stream:
        body.stream = True
    copy_sampling(request, body, MESSAGES_SAMPLING)
    user = request.user if isinstance(request.user, str) else request.safety_identifier
    if isinstance(user, str) and user:
        body.metadata = Metadata(user_id=user)
    if isinstance(request.reasoning_effort, str) and request.reasoning_effort != "none":
        body.thinking, body.max_tokens = _thinking(request, max_tokens, explicit)
    tools = _tools(request)
    choice = _tool_choice(request) if tools else None
    forced = answer_tool(request)
    if forced is not None:
        if tools or body.thinking is not UNSET:
            raise BadRequest(
                "on the anthropic provider response_format cannot be combined with tools "
                "or reasoning_effort",
                param="response_format",
            )
        tools, choice = [_answer_tool_param(request, forced)], ToolChoice(type="tool", name=forced)
    if tools:
        body.tools = tools
    if choice is not None:
        body.tool_choice = choice
    return body


def _answer_tool_param(request: ChatRequest, name: str) -> ToolParam:
    fmt = request.response_format
    spec = fmt.get("json_schema") if isinstance(fmt, dict) else None
    schema = spec.get("schema") if isinstance(spec, dict) else None
    description = spec.get("description") if isinstance(spec, dict) else None
    tool = ToolParam(
        name=name,
        input_schema=schema if isinstance(schema, dict) else {"type": "object"},
        description="Respond with the answer as this tool's input.",
    )
    if isinstance(description, str) and description:
        tool.description = description
    return tool
