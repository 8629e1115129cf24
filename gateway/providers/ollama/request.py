"""OpenAI chat request -> Ollama native `/api/chat` request, sans-IO.

Every OpenAI field is translated, ignored (with a reason) or rejected with a 400; the list
is in docs/providers.md ("Ollama"). The rules that need care:
- content is one string per message (text parts joined); `""` stays `""`;
- images go in the message's `images` as bare base64, so only `data:` URLs are accepted
  (Ollama does not fetch URLs);
- assistant tool calls carry `arguments` as a JSON object, not a string;
- `tool` results name the function in `tool_name`, which OpenAI leaves out, so it is looked
  up by `tool_call_id` in the earlier assistant `tool_calls`.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from gateway.errors import BadRequest
from gateway.providers.base import UpstreamCall
from gateway.providers.translate import arguments_object
from gateway.providers.translate import copy_sampling
from gateway.providers.translate import given
from gateway.providers.translate import refuse_beyond_one_text_choice
from gateway.wire import ollama as o
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Message

# reasoning_effort -> Ollama `think`: levels go through as strings (gpt-oss uses them;
# other thinking models take any level as "on"), `none` turns thinking off.
THINK: dict[str, bool | str] = {
    "none": False,
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
}


def _text_and_images(content: Any, param: str) -> tuple[str, list[str]]:
    if content is None or content is UNSET:
        return "", []
    if isinstance(content, str):
        return content, []
    text: list[str] = []
    images: list[str] = []
    for i, part in enumerate(content):
        where = f"{param}[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            value = part.get("text")
            if isinstance(value, str):
                text.append(value)
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            images.append(_image(url, where))
        else:
            raise BadRequest(f"content part type {kind!r} is not supported by Ollama", param=where)
    return "".join(text), images


def _image(url: Any, param: str) -> str:
    if not isinstance(url, str):
        raise BadRequest("image_url needs a url", param=param)
    header, sep, data = url.partition(",")
    if not url.startswith("data:") or not sep or ";base64" not in header:
        raise BadRequest("Ollama takes images inline only: use a base64 data: URL", param=param)
    return data


def translate_messages(messages: list[Message]) -> list[o.Message]:
    out: list[o.Message] = []
    names: dict[str, str] = {}  # tool_call_id -> function name
    for i, m in enumerate(messages):
        param = f"messages[{i}]"
        text, images = _text_and_images(m.content, param + ".content")
        role = "system" if m.role in ("system", "developer") else m.role
        msg = o.Message(role=role, content=text)
        if images:
            msg.images = images
        if m.role == "assistant":
            calls = []
            for j, tc in enumerate(m.tool_calls or ()):
                names[tc.id] = tc.function.name
                args = arguments_object(tc.function.arguments, f"{param}.tool_calls[{j}].function")
                calls.append(o.RequestToolCall(o.RequestFunctionCall(tc.function.name, args)))
            if calls:
                msg.tool_calls = calls
            if isinstance(m.reasoning_content, str) and m.reasoning_content:
                msg.thinking = m.reasoning_content
        elif m.role in ("tool", "function"):
            msg.role = "tool"
            name = names.get(m.tool_call_id) if isinstance(m.tool_call_id, str) else None
            if name is None and isinstance(m.name, str):
                name = m.name
            if name is not None:
                msg.tool_name = name
        out.append(msg)
    return out


def translate_tools(request: ChatRequest) -> list[o.Tool] | None:
    choice = request.tool_choice
    if choice == "none":
        return None  # Ollama has no tool_choice: not offering the tools is "none"
    only: str | None = None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if choice.get("type") != "function" or not isinstance(name, str) or not name:
            raise BadRequest(
                "tool_choice must be auto, none, required or a function", param="tool_choice"
            )
        only = name
    elif choice not in (None, UNSET, "auto", "required"):
        raise BadRequest(
            "tool_choice must be auto, none, required or a function", param="tool_choice"
        )
    tools = []
    for t in request.tools or ():
        if t.type != "function" or not t.function:
            continue  # Ollama has only function tools
        fn = t.function
        if only is not None and fn.name != only:
            continue
        tools.append(
            o.Tool(
                o.ToolFunction(name=fn.name, description=fn.description, parameters=fn.parameters)
            )
        )
    return tools or None


def _reject(request: ChatRequest) -> None:
    r = request
    refuse_beyond_one_text_choice(r, "Ollama")
    if r.audio:
        raise BadRequest("Ollama chat models answer in text only", param="audio")
    if r.logit_bias:
        raise BadRequest("logit_bias is not available from Ollama", param="logit_bias")
    if r.prediction:
        raise BadRequest("predicted outputs are not available from Ollama", param="prediction")
    if r.web_search_options:
        raise BadRequest("web search is not available from Ollama", param="web_search_options")


# the chat sampling parameters Ollama's options take (its own names are the same)
SAMPLING = {
    name: name
    for name in ("temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty")
}


def options(request: ChatRequest) -> o.Options | None:
    r = request
    opts = o.Options()
    max_tokens = r.max_completion_tokens if r.max_completion_tokens else r.max_tokens
    if max_tokens:
        opts.num_predict = max_tokens
    copy_sampling(r, opts, SAMPLING)
    return opts if opts != o.Options() else None


def response_format(fmt: Any) -> str | dict[str, Any] | None:
    if not isinstance(fmt, dict):
        return None
    kind = fmt.get("type")
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else "json"
    if kind == "text":
        return None
    raise BadRequest(f"response_format type {kind!r} is not supported", param="response_format")


def think(effort: Any) -> bool | str | None:
    if not isinstance(effort, str):
        return None
    value = THINK.get(effort)
    if value is None:
        raise BadRequest(
            f"reasoning_effort {effort!r} is not one of {', '.join(THINK)}",
            param="reasoning_effort",
        )
    return value


def build_body(call: UpstreamCall) -> bytes:
    """The JSON body of the `/api/chat` request for this call."""
    request = call.request
    _reject(request)
    body = o.ChatRequest(
        model=call.model,
        messages=translate_messages(request.messages),
        stream=call.stream,
        tools=given(translate_tools(request)),
        options=given(options(request)),
        format=given(response_format(request.response_format)),
        think=given(think(request.reasoning_effort)),
    )
    return o.encoder.encode(body)
