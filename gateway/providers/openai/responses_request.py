"""Canonical chat request -> OpenAI Responses API request body (`POST /responses`), sans-IO.

docs/providers.md ("OpenAI Responses API upstream") lists every chat field and whether it is
translated, ignored (and why) or rejected with a 400; keep the two in step. The choices that
shape this module:

- Messages become `input` items in their order, each keeping its role: system and developer
  messages stay `system` / `developer` message items (not `instructions`), so several of
  them, and one in the middle of a conversation, keep their place and their role.
- Text content is forwarded as sent: a string stays a string (`""` included), text parts
  become `input_text` (`output_text` for the assistant), image parts `input_image`.
- Assistant tool calls become `function_call` items whose `call_id` is the chat tool-call
  id; tool messages become `function_call_output` items.
- `store` is always false: the gateway keeps no state upstream and every request carries
  the whole conversation.
- Responses function tools are strict by default and chat tools are not: a tool without
  `strict` is sent with `strict: false`, and one without `parameters` with the empty object
  schema chat gives it.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from gateway.errors import BadRequest
from gateway.providers.base import UpstreamCall
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Message
from gateway.wire.openai_chat import Tool

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}

# chat fields copied under the same name, with the same meaning, when the client sent them
SAME_NAME = (
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "safety_identifier",
    "metadata",
    "prompt_cache_key",
    "service_tier",
)
# chat fields the Responses API takes under the same name that ChatRequest does not model
SAME_NAME_UNTYPED = ("prompt_cache_retention", "max_tool_calls", "truncation")
# chat fields with no Responses equivalent that change what the answer is: a 400, unless
# the client sent the value that means "off" (see `_reject_unsupported`)
REJECTED = (
    "n",
    "logprobs",
    "top_logprobs",
    "stop",
    "logit_bias",
    "frequency_penalty",
    "presence_penalty",
    "audio",
    "web_search_options",
    "functions",
    "function_call",
)


def responses_body(call: UpstreamCall) -> dict[str, Any]:
    """The Responses request for `call`: translated from the chat request, or, for a client
    that speaks Responses itself (`call.native`), its own body with three fields set."""
    if call.native is not None:
        body = dict(call.native.body)
        body["model"] = call.model
        body["stream"] = call.stream
        body["store"] = False
        return body
    return translate_request(call.request, call.body, model=call.model, stream=call.stream)


def translate_request(
    request: ChatRequest, raw: dict[str, Any], *, model: str, stream: bool
) -> dict[str, Any]:
    """A chat request as a Responses request. `raw` is the client's JSON as sent (for the
    fields ChatRequest does not model, and to tell `null` from absent)."""
    _reject_unsupported(request, raw)
    body: dict[str, Any] = {"model": model, "input": input_items(request.messages)}
    for name in SAME_NAME:
        if name in raw:
            body[name] = raw[name]
    for name in SAME_NAME_UNTYPED:
        if name in raw:
            body[name] = raw[name]
    limit = _first_set(request.max_completion_tokens, request.max_tokens)
    if limit is not UNSET:
        body["max_output_tokens"] = limit
    if request.tools:
        body["tools"] = [_tool(tool, i) for i, tool in enumerate(request.tools)]
    if request.tool_choice is not UNSET and request.tool_choice is not None:
        body["tool_choice"] = _tool_choice(request.tool_choice)
    text = _text_config(request)
    if text:
        body["text"] = text
    if request.reasoning_effort is not UNSET and request.reasoning_effort is not None:
        body["reasoning"] = {"effort": request.reasoning_effort}
    body["stream"] = stream
    if stream:
        options = request.stream_options
        if options and options.include_obfuscation is not UNSET:
            body["stream_options"] = {"include_obfuscation": options.include_obfuscation}
    body["store"] = False
    return body


def _first_set(*values: Any) -> Any:
    for value in values:
        if value is not UNSET and value is not None:
            return value
    return UNSET


def _reject_unsupported(request: ChatRequest, raw: dict[str, Any]) -> None:
    """A 400 for a field whose effect the Responses API cannot give; the value that asks for
    nothing (`n: 1`, `logprobs: false`, `stop: []`, a zero penalty, null) passes."""
    for name in REJECTED:
        value = raw.get(name)
        if value is None or value is False or value == [] or value == {}:
            continue
        if name == "n" and value == 1:
            continue
        if name in ("frequency_penalty", "presence_penalty", "top_logprobs") and value == 0:
            continue
        raise BadRequest(
            f"{name!r} is not supported by this model's upstream (the OpenAI Responses API)",
            param=name,
        )
    if request.modalities and any(m != "text" for m in request.modalities):
        raise BadRequest(
            "only text output is supported by this model's upstream (the OpenAI Responses API)",
            param="modalities",
        )


# --- messages -----------------------------------------------------------------------------


def input_items(messages: list[Message]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        at = f"messages[{i}]"
        role = message.role
        if role == "tool":
            items.append(_tool_output(message, at))
        elif role == "assistant":
            items.extend(_assistant(message, at))
        elif role in ("system", "developer", "user"):
            content = message.content
            if content is UNSET or content is None:
                raise BadRequest(f"{at}.content is required", param=f"{at}.content")
            items.append(
                {"type": "message", "role": role, "content": _content(content, at, "input_text")}
            )
        else:
            raise BadRequest(
                f"role {role!r} is not supported by this model's upstream (the OpenAI "
                "Responses API); send tool calls and results as tool_calls and tool messages",
                param=f"{at}.role",
            )
    return items


def _assistant(message: Message, at: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    content = message.content
    refusal = message.refusal
    if content is not UNSET and content is not None:
        parts = _content(content, at, "output_text")
        if isinstance(refusal, str):
            if isinstance(parts, str):
                parts = [_output_text(parts)] if parts else []
            parts.append({"type": "refusal", "refusal": refusal})
        items.append({"type": "message", "role": "assistant", "content": parts})
    elif isinstance(refusal, str):
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "refusal", "refusal": refusal}],
            }
        )
    items.extend(
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.function.name,
            "arguments": call.function.arguments,
        }
        for call in message.tool_calls or ()
    )
    return items


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _tool_output(message: Message, at: str) -> dict[str, Any]:
    if message.tool_call_id is UNSET:
        raise BadRequest(f"{at}.tool_call_id is required", param=f"{at}.tool_call_id")
    content = message.content
    if content is UNSET or content is None:
        raise BadRequest(f"{at}.content is required", param=f"{at}.content")
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise BadRequest(
                    "a tool message's content parts must be text parts",
                    param=f"{at}.content[{j}]",
                )
            texts.append(part["text"])
        content = "".join(texts)
    return {"type": "function_call_output", "call_id": message.tool_call_id, "output": content}


def _content(
    content: str | list[dict[str, Any]], at: str, text_type: str
) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [_part(part, f"{at}.content[{j}]", text_type) for j, part in enumerate(content)]


def _part(part: dict[str, Any], at: str, text_type: str) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise BadRequest(f"{at}.text must be a string", param=f"{at}.text")
        return (
            _output_text(text)
            if text_type == "output_text"
            else {"type": "input_text", "text": text}
        )
    if kind == "refusal" and text_type == "output_text":
        return {"type": "refusal", "refusal": part.get("refusal", "")}
    if kind == "image_url" and text_type == "input_text":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else None
        if not isinstance(url, str):
            raise BadRequest(f"{at}.image_url.url must be a string", param=f"{at}.image_url.url")
        out: dict[str, Any] = {"type": "input_image", "image_url": url}
        detail = image.get("detail") if isinstance(image, dict) else None
        out["detail"] = detail if isinstance(detail, str) else "auto"
        return out
    if kind == "file" and text_type == "input_text":
        file = part.get("file")
        if not isinstance(file, dict):
            raise BadRequest(f"{at}.file must be an object", param=f"{at}.file")
        fields = ("file_id", "file_data", "filename")
        return {"type": "input_file", **{k: file[k] for k in fields if k in file}}
    raise BadRequest(
        f"content part type {kind!r} is not supported here by this model's upstream "
        "(the OpenAI Responses API)",
        param=f"{at}.type",
    )


# --- tools and output format ----------------------------------------------------------------


def _tool(tool: Tool, i: int) -> dict[str, Any]:
    if tool.type != "function" or tool.function is UNSET:
        raise BadRequest(
            f"tool type {tool.type!r} is not supported by this model's upstream (the OpenAI "
            "Responses API); only function tools are",
            param=f"tools[{i}].type",
        )
    fn = tool.function
    out: dict[str, Any] = {"type": "function", "name": fn.name}
    if fn.description is not UNSET:
        out["description"] = fn.description
    out["parameters"] = fn.parameters if fn.parameters is not UNSET else EMPTY_PARAMETERS
    out["strict"] = bool(fn.strict)
    return out


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        if choice in ("none", "auto", "required"):
            return choice
        raise BadRequest(f"tool_choice {choice!r} is not valid", param="tool_choice")
    kind = choice.get("type")
    if kind == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise BadRequest("tool_choice.function.name is required", param="tool_choice")
        return {"type": "function", "name": name}
    if kind == "allowed_tools":
        allowed = choice.get("allowed_tools")
        if not isinstance(allowed, dict) or not isinstance(allowed.get("tools"), list):
            raise BadRequest("tool_choice.allowed_tools.tools is required", param="tool_choice")
        tools = []
        for t in allowed["tools"]:
            fn = t.get("function") if isinstance(t, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise BadRequest(
                    "tool_choice.allowed_tools.tools may only name functions",
                    param="tool_choice",
                )
            tools.append({"type": "function", "name": fn["name"]})
        return {"type": "allowed_tools", "mode": allowed.get("mode", "auto"), "tools": tools}
    raise BadRequest(
        f"tool_choice type {kind!r} is not supported by this model's upstream",
        param="tool_choice",
    )


def _text_config(request: ChatRequest) -> dict[str, Any]:
    text: dict[str, Any] = {}
    fmt = request.response_format
    if fmt is not UNSET and fmt is not None:
        kind = fmt.get("type")
        if kind in ("text", "json_object"):
            text["format"] = {"type": kind}
        elif kind == "json_schema":
            schema = fmt.get("json_schema")
            if not isinstance(schema, dict) or not isinstance(schema.get("name"), str):
                raise BadRequest(
                    "response_format.json_schema.name is required",
                    param="response_format.json_schema",
                )
            out = {"type": "json_schema", "name": schema["name"]}
            for key in ("schema", "description", "strict"):
                if key in schema:
                    out[key] = schema[key]
            text["format"] = out
        else:
            raise BadRequest(
                f"response_format type {kind!r} is not supported", param="response_format"
            )
    if request.verbosity is not UNSET and request.verbosity is not None:
        text["verbosity"] = request.verbosity
    return text
