"""Anthropic Messages request -> canonical chat request, sans-IO.

The result is a pair: the typed `ChatRequest` every provider adapter reads, and the
canonical JSON body an OpenAI-compatible upstream is sent as is. They say the same thing,
except that the typed request also carries the client's `cache_control` marks (on content
part dicts and as `CacheControlledTool`s) for the Anthropic adapter, while the JSON body
never holds them: an OpenAI-compatible server would reject an unknown key.

docs/api-messages.md lists every request field and what becomes of it; keep the two in step.
The shapes worth knowing:
- a user turn holding `tool_result` blocks becomes one `tool` message per result, in order,
  then a user message with the turn's other blocks (if any); images inside a tool result
  move to that user message, since chat tool messages take text only;
- assistant `thinking` and `redacted_thinking` blocks are dropped (no chat field carries
  them back to any upstream, signatures included);
- `thinking.budget_tokens` becomes `reasoning_effort` by `effort_for_budget`.
"""

from __future__ import annotations

from typing import Any
from typing import NamedTuple

import msgspec

from gateway.errors import BadRequest
from gateway.wire.anthropic import CacheControlledTool
from gateway.wire.anthropic import InboundMessage
from gateway.wire.anthropic import InboundRequest
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import FunctionDefinition
from gateway.wire.openai_chat import Tool

MIN_THINKING_BUDGET = 1024  # Anthropic's own lower bound
# budget_tokens below each bound -> that effort; at or past the last one -> "high"
EFFORT_BOUNDS = ((4000, "low"), (16000, "medium"))
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
_json_encode = msgspec.json.encode


class CanonicalRequest(NamedTuple):
    request: ChatRequest  # typed, with cache_control marks for the Anthropic adapter
    body: dict[str, Any]  # the canonical JSON object, without them


def effort_for_budget(budget: int) -> str:
    for bound, effort in EFFORT_BOUNDS:
        if budget < bound:
            return effort
    return "high"


def translate_request(params: InboundRequest, *, count_only: bool = False) -> CanonicalRequest:
    """The canonical request for a client's Messages request; `count_only` (count_tokens)
    does not require `max_tokens`."""
    messages = _system(params.system) + _messages(params.messages)
    body: dict[str, Any] = {"model": params.model, "messages": messages}
    max_tokens = params.max_tokens
    if isinstance(max_tokens, int):
        if max_tokens < 1:
            raise BadRequest("max_tokens must be at least 1", param="max_tokens")
        body["max_completion_tokens"] = max_tokens
    elif not count_only:
        raise BadRequest("max_tokens: Field required", param="max_tokens")
    for name in ("stream", "temperature", "top_p"):
        value = getattr(params, name)
        if value is not UNSET:
            body[name] = value
    if params.stop_sequences is not UNSET:
        body["stop"] = params.stop_sequences
    _metadata(params.metadata, body)
    _thinking(params.thinking, max_tokens, body)
    _reject_unserved(params)
    tools = _tools(params.tools)
    if tools is not None:
        body["tools"] = [_function_tool(t) for t in tools]
    if params.tool_choice is not UNSET:
        _tool_choice(params.tool_choice, body)
    request = msgspec.convert(body, ChatRequest)
    if tools:
        request.tools = tools
    clean = dict(body)
    clean["messages"] = [_without_cache_control(m) for m in messages]
    return CanonicalRequest(request, clean)


# --- system and messages ---------------------------------------------------------------


def _system(system: Any) -> list[dict[str, Any]]:
    if system is UNSET or system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    parts = []
    for j, block in enumerate(system):
        if block.get("type") != "text":
            raise _unsupported_block(block, f"system[{j}]", "system text blocks only")
        parts.append(_text_part(block, f"system[{j}]"))
    return [{"role": "system", "content": parts}]


def _messages(turns: list[InboundMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, turn in enumerate(turns):
        if turn.role == "user":
            out.extend(_user_turn(turn.content, i))
        elif turn.role == "assistant":
            message = _assistant_turn(turn.content, i)
            if message is not None:
                out.append(message)
        else:
            raise BadRequest(
                f"role must be 'user' or 'assistant', not {turn.role!r}",
                param=f"messages[{i}].role",
            )
    return out


def _user_turn(content: str | list[dict[str, Any]], i: int) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tool_messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        at = f"messages[{i}].content[{j}]"
        kind = block.get("type")
        if kind == "text":
            parts.append(_text_part(block, at))
        elif kind == "image":
            parts.append(_image_part(block, at))
        elif kind == "tool_result":
            message, images = _tool_result(block, at)
            tool_messages.append(message)
            parts.extend(images)
        else:
            raise _unsupported_block(block, at, "text, image and tool_result in a user turn")
    if tool_messages and not parts:
        return tool_messages
    return [*tool_messages, {"role": "user", "content": parts}]


def _assistant_turn(content: str | list[dict[str, Any]], i: int) -> dict[str, Any] | None:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    dropped = False
    for j, block in enumerate(content):
        at = f"messages[{i}].content[{j}]"
        kind = block.get("type")
        if kind == "text":
            parts.append(_text_part(block, at))
        elif kind == "tool_use":
            calls.append(_tool_call(block, at))
        elif kind in ("thinking", "redacted_thinking"):
            dropped = True
        else:
            raise _unsupported_block(
                block, at, "text, tool_use, thinking and redacted_thinking in an assistant turn"
            )
    if dropped and not parts and not calls:
        return None  # only thinking: nothing of this turn reaches any upstream
    message: dict[str, Any] = {"role": "assistant"}
    if parts or not calls:
        message["content"] = parts
    if calls:
        message["tool_calls"] = calls
    return message


def _text_part(block: dict[str, Any], at: str) -> dict[str, Any]:
    text = block.get("text")
    if not isinstance(text, str):
        raise BadRequest("a text block needs a string 'text'", param=f"{at}.text")
    return _with_cache_control({"type": "text", "text": text}, block, at)


def _image_part(block: dict[str, Any], at: str) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, dict):
        raise BadRequest("an image block needs a 'source' object", param=f"{at}.source")
    kind = source.get("type")
    if kind == "base64":
        media_type, data = source.get("media_type"), source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str):
            raise BadRequest(
                "a base64 image source needs string 'media_type' and 'data'", param=f"{at}.source"
            )
        url = f"data:{media_type};base64,{data}"
    elif kind == "url":
        given = source.get("url")
        if not isinstance(given, str):
            raise BadRequest("a url image source needs a string 'url'", param=f"{at}.source.url")
        url = given
    else:
        raise BadRequest(
            f"image source type {kind!r} is not supported (base64 or url)",
            param=f"{at}.source.type",
        )
    return _with_cache_control({"type": "image_url", "image_url": {"url": url}}, block, at)


def _tool_result(block: dict[str, Any], at: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The tool message of one tool_result block, and the images it held."""
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str):
        raise BadRequest("a tool_result needs a string 'tool_use_id'", param=f"{at}.tool_use_id")
    content = block.get("content", "")
    images: list[dict[str, Any]] = []
    result: str | list[dict[str, Any]]
    if isinstance(content, str):
        result = content
        if isinstance(block.get("cache_control"), dict):
            result = [_with_cache_control({"type": "text", "text": content}, block, at)]
    elif isinstance(content, list):
        result = []
        for k, inner in enumerate(content):
            where = f"{at}.content[{k}]"
            kind = inner.get("type") if isinstance(inner, dict) else None
            if kind == "text":
                result.append(_text_part(inner, where))
            elif kind == "image":
                images.append(_image_part(inner, where))
            else:
                raise _unsupported_block(inner, where, "text and image in a tool_result")
        if result and isinstance(block.get("cache_control"), dict):
            result[-1] = _with_cache_control(result[-1], block, at)
    else:
        raise BadRequest(
            "tool_result content must be a string or a list of blocks", param=f"{at}.content"
        )
    return {"role": "tool", "tool_call_id": tool_use_id, "content": result}, images


def _tool_call(block: dict[str, Any], at: str) -> dict[str, Any]:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str):
        raise BadRequest("a tool_use block needs a string 'id'", param=f"{at}.id")
    if not isinstance(name, str):
        raise BadRequest("a tool_use block needs a string 'name'", param=f"{at}.name")
    if not isinstance(arguments, dict):
        raise BadRequest("a tool_use block's 'input' must be an object", param=f"{at}.input")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": _json_encode(arguments).decode()},
    }


def _with_cache_control(part: dict[str, Any], block: dict[str, Any], at: str) -> dict[str, Any]:
    mark = block.get("cache_control")
    if mark is None:
        return part
    if not isinstance(mark, dict):
        raise BadRequest("cache_control must be an object", param=f"{at}.cache_control")
    return {**part, "cache_control": mark}


def _without_cache_control(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list) or not any("cache_control" in p for p in content):
        return message
    parts = [{k: v for k, v in p.items() if k != "cache_control"} for p in content]
    return {**message, "content": parts}


def _unsupported_block(block: Any, at: str, allowed: str) -> BadRequest:
    kind = block.get("type") if isinstance(block, dict) else None
    return BadRequest(
        f"content block type {kind!r} is not supported here (the gateway takes {allowed})",
        param=f"{at}.type",
    )


# --- everything else -------------------------------------------------------------------


def _metadata(metadata: Any, body: dict[str, Any]) -> None:
    if not isinstance(metadata, dict) or "user_id" not in metadata:
        return
    user = metadata["user_id"]
    if user is not None and not isinstance(user, str):
        raise BadRequest("metadata.user_id must be a string", param="metadata.user_id")
    body["user"] = user


def _thinking(thinking: Any, max_tokens: Any, body: dict[str, Any]) -> None:
    if thinking is UNSET or thinking is None:
        return
    kind = thinking.get("type")
    if kind == "disabled":
        return
    if kind != "enabled":
        raise BadRequest(
            f"thinking.type must be 'enabled' or 'disabled', not {kind!r}", param="thinking.type"
        )
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < MIN_THINKING_BUDGET:
        raise BadRequest(
            f"thinking.budget_tokens must be an integer of at least {MIN_THINKING_BUDGET}",
            param="thinking.budget_tokens",
        )
    if isinstance(max_tokens, int) and budget >= max_tokens:
        raise BadRequest(
            "thinking.budget_tokens must be less than max_tokens", param="thinking.budget_tokens"
        )
    body["reasoning_effort"] = effort_for_budget(budget)


def _reject_unserved(params: InboundRequest) -> None:
    if params.mcp_servers:
        raise BadRequest("mcp_servers are not supported by the gateway", param="mcp_servers")
    if params.container not in (UNSET, None):
        raise BadRequest("container is not supported by the gateway", param="container")


def _tools(tools: Any) -> list[Tool] | None:
    if tools is UNSET or tools is None:
        return None
    out: list[Tool] = []
    for i, spec in enumerate(tools):
        kind = spec.get("type", "custom")
        if kind != "custom":
            raise BadRequest(
                f"tool type {kind!r} is an Anthropic server tool; the gateway serves custom "
                "tools (name, description, input_schema) only",
                param=f"tools[{i}].type",
            )
        name, schema = spec.get("name"), spec.get("input_schema")
        if not isinstance(name, str):
            raise BadRequest("a tool needs a string 'name'", param=f"tools[{i}].name")
        if not isinstance(schema, dict):
            raise BadRequest(
                "a tool needs an 'input_schema' object", param=f"tools[{i}].input_schema"
            )
        function = FunctionDefinition(name=name, parameters=schema)
        description = spec.get("description")
        if isinstance(description, str):
            function.description = description
        elif description is not None:
            raise BadRequest("description must be a string", param=f"tools[{i}].description")
        mark = spec.get("cache_control")
        if isinstance(mark, dict):
            out.append(CacheControlledTool(type="function", function=function, cache_control=mark))
        else:
            out.append(Tool(type="function", function=function))
    return out


def _function_tool(tool: Tool) -> dict[str, Any]:
    function = msgspec.to_builtins(tool.function)
    return {"type": "function", "function": function}


def _tool_choice(choice: Any, body: dict[str, Any]) -> None:
    if choice is None:
        body["tool_choice"] = None
        return
    kind = choice.get("type")
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str):
            raise BadRequest("tool_choice of type 'tool' needs a 'name'", param="tool_choice.name")
        body["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif isinstance(kind, str) and kind in TOOL_CHOICES:  # a JSON object or list is unhashable
        body["tool_choice"] = TOOL_CHOICES[kind]
    else:
        raise BadRequest(
            f"tool_choice.type must be auto, any, tool or none, not {kind!r}",
            param="tool_choice.type",
        )
    if choice.get("disable_parallel_tool_use") is True:
        body["parallel_tool_calls"] = False
