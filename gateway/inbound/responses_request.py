"""OpenAI Responses API requests in, canonical Chat Completions requests out (sans-IO).

`ResponsesRequest` types what the gateway reads of a `POST /v1/responses` body; `to_chat`
turns it, with the items of an earlier turn (`previous_response_id`), into the canonical
chat body and request. `StoredResponse` is what the gateway keeps of a response so that
the next turn can continue from it: the expanded input of its request and its output
items (the instructions are not kept: a new turn's instructions replace them, as OpenAI
documents).

Items are read as JSON objects and checked here field by field, so that a wrong value gets
a 400 whose `param` names it (`input[2].call_id`). No IO: this module must not import
asyncio or aiohttp.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET
from msgspec import Struct
from msgspec import UnsetType

from gateway.errors import BadRequest
from gateway.wire.openai_chat import ChatRequest

MESSAGE_ROLES = frozenset({"user", "system", "developer", "assistant"})
TOOL_CHOICE_MODES = frozenset({"auto", "none", "required"})
TEXT_PARTS = frozenset({"input_text", "output_text"})
# Responses fields copied to the chat request under the same name and meaning.
SAME_NAME = (
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
)
# Features that need OpenAI's own server state or tools; the gateway cannot offer them.
REJECTED = {
    "background": "background responses are not supported by the gateway",
    "conversation": "conversations are not supported by the gateway; use previous_response_id",
    "prompt": "stored prompt templates are not supported by the gateway",
}


class ResponsesRequest(Struct, gc=False):
    """The fields of a Responses request that the gateway reads (others are ignored in
    translation and forwarded unchanged to `api: responses` targets)."""

    model: str
    input: str | list[dict[str, Any]] | UnsetType = UNSET
    instructions: str | UnsetType | None = UNSET
    previous_response_id: str | UnsetType | None = UNSET
    tools: list[dict[str, Any]] | UnsetType | None = UNSET
    tool_choice: str | dict[str, Any] | UnsetType | None = UNSET
    parallel_tool_calls: bool | UnsetType | None = UNSET
    max_output_tokens: int | UnsetType | None = UNSET
    temperature: float | UnsetType | None = UNSET
    top_p: float | UnsetType | None = UNSET
    text: dict[str, Any] | UnsetType | None = UNSET
    reasoning: dict[str, Any] | UnsetType | None = UNSET
    stream: bool | UnsetType | None = UNSET
    store: bool | UnsetType | None = UNSET
    metadata: dict[str, str] | UnsetType | None = UNSET
    user: str | UnsetType | None = UNSET
    safety_identifier: str | UnsetType | None = UNSET
    prompt_cache_key: str | UnsetType | None = UNSET
    service_tier: str | UnsetType | None = UNSET
    top_logprobs: int | UnsetType | None = UNSET
    truncation: str | UnsetType | None = UNSET
    include: list[str] | UnsetType | None = UNSET
    max_tool_calls: int | UnsetType | None = UNSET
    background: bool | UnsetType | None = UNSET
    conversation: str | dict[str, Any] | UnsetType | None = UNSET
    prompt: dict[str, Any] | UnsetType | None = UNSET


class StoredResponse(Struct, gc=False):
    """One stored response: what a later `previous_response_id` continues from."""

    id: str
    input: list[dict[str, Any]]  # the whole conversation before this turn's output
    output: list[dict[str, Any]]
    # who created it (`owner_of` the caller): only the same caller may continue it; a
    # record without one (stored before owners were kept) is no one's
    owner: str = ""


stored_encoder = msgspec.json.Encoder()
stored_decoder = msgspec.json.Decoder(StoredResponse)


def stored_key(response_id: str) -> str:
    return "resp:" + response_id


# --- input ---------------------------------------------------------------------------------


def input_items(request: ResponsesRequest) -> list[dict[str, Any]]:
    """This request's `input` as a list of items (a string is one user message)."""
    given = request.input
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    if isinstance(given, list):
        return given
    return []


def history_for_native(stored: StoredResponse) -> list[dict[str, Any]]:
    """A stored conversation as input items for an upstream that speaks Responses itself.
    Reasoning items the gateway built from another provider's reasoning text carry no
    `encrypted_content`; OpenAI cannot resume those (it looks them up by id), so they stay
    out of the upstream's input."""
    return [
        item
        for item in (*stored.input, *stored.output)
        if not (item.get("type") == "reasoning" and not item.get("encrypted_content"))
    ]


def to_messages(items: list[dict[str, Any]], param: str = "input") -> list[dict[str, Any]]:
    """Responses input items as chat messages. Consecutive `function_call` items become one
    assistant message with `tool_calls`, joined to an assistant message just before them;
    `reasoning` items are not sent (providers cannot take another model's reasoning)."""
    messages: list[dict[str, Any]] = []
    calls_open = False  # the last message is an assistant message that may take more calls
    for i, item in enumerate(items):
        at = f"{param}[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"'{at}' must be an object", param=at)
        kind = item.get("type", "message")
        if kind == "message":
            message = _message(item, at)
            messages.append(message)
            calls_open = message["role"] == "assistant"
        elif kind == "function_call":
            call = _function_call(item, at)
            if calls_open:
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                calls_open = True
        elif kind == "function_call_output":
            messages.append(_function_output(item, at))
            calls_open = False
        elif kind == "reasoning":
            continue  # does not end a run of calls: reasoning comes before them
        else:
            raise BadRequest(
                f"input items of type {kind!r} are not supported by the gateway; "
                "supported: message, function_call, function_call_output, reasoning",
                param=f"{at}.type",
            )
    return messages


def _string(item: dict[str, Any], field: str, at: str) -> str:
    value = item.get(field, UNSET)
    if value is UNSET:
        raise BadRequest(f"Missing required parameter: '{at}.{field}'", param=f"{at}.{field}")
    if not isinstance(value, str):
        raise BadRequest(f"'{at}.{field}' must be a string", param=f"{at}.{field}")
    return value


def _message(item: dict[str, Any], at: str) -> dict[str, Any]:
    role = _string(item, "role", at)
    if role not in MESSAGE_ROLES:
        raise BadRequest(
            f"'{at}.role' must be one of user, system, developer, assistant (got {role!r})",
            param=f"{at}.role",
        )
    if "content" not in item:
        raise BadRequest(f"Missing required parameter: '{at}.content'", param=f"{at}.content")
    content = item["content"]
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise BadRequest(
            f"'{at}.content' must be a string or a list of parts", param=f"{at}.content"
        )
    if role == "assistant":
        return _assistant_content(content, f"{at}.content")
    parts = [_input_part(part, f"{at}.content[{j}]") for j, part in enumerate(content)]
    return {"role": role, "content": parts}


def _part_type(part: Any, at: str) -> str:
    if not isinstance(part, dict):
        raise BadRequest(f"'{at}' must be an object", param=at)
    kind = part.get("type")
    if not isinstance(kind, str):
        raise BadRequest(f"Missing required parameter: '{at}.type'", param=f"{at}.type")
    return kind


def _input_part(part: Any, at: str) -> dict[str, Any]:
    kind = _part_type(part, at)
    if kind in TEXT_PARTS:
        return {"type": "text", "text": _string(part, "text", at)}
    if kind == "input_image":
        if part.get("file_id") is not None:
            raise BadRequest(
                "images by file_id are not supported by the gateway; send image_url "
                "(an https or data: URL)",
                param=f"{at}.file_id",
            )
        image: dict[str, Any] = {"url": _string(part, "image_url", at)}
        if "detail" in part:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise BadRequest(
        f"content parts of type {kind!r} are not supported by the gateway; "
        "supported: input_text, input_image, output_text",
        param=f"{at}.type",
    )


def _assistant_content(parts: list[Any], at: str) -> dict[str, Any]:
    texts: list[dict[str, Any]] = []
    refusals: list[str] = []
    for j, part in enumerate(parts):
        where = f"{at}[{j}]"
        kind = _part_type(part, where)
        if kind in TEXT_PARTS:
            texts.append({"type": "text", "text": _string(part, "text", where)})
        elif kind == "refusal":
            refusals.append(_string(part, "refusal", where))
        else:
            raise BadRequest(
                f"assistant content parts must be output_text or refusal, not {kind!r}",
                param=f"{where}.type",
            )
    message: dict[str, Any] = {"role": "assistant"}
    # one text part (what the gateway itself returns) is the plain string chat expects
    message["content"] = texts[0]["text"] if len(texts) == 1 else texts or None
    if refusals:
        message["refusal"] = "".join(refusals)
    return message


def _function_call(item: dict[str, Any], at: str) -> dict[str, Any]:
    return {
        "id": _string(item, "call_id", at),
        "type": "function",
        "function": {
            "name": _string(item, "name", at),
            "arguments": _string(item, "arguments", at),
        },
    }


def _function_output(item: dict[str, Any], at: str) -> dict[str, Any]:
    call_id = _string(item, "call_id", at)
    if "output" not in item:
        raise BadRequest(f"Missing required parameter: '{at}.output'", param=f"{at}.output")
    output = item["output"]
    if isinstance(output, list):
        parts = []
        for j, part in enumerate(output):
            where = f"{at}.output[{j}]"
            if _part_type(part, where) not in TEXT_PARTS:
                raise BadRequest(
                    "function_call_output parts must be input_text: chat tool results "
                    "carry text only",
                    param=f"{where}.type",
                )
            parts.append({"type": "text", "text": _string(part, "text", where)})
        return {"role": "tool", "tool_call_id": call_id, "content": parts}
    if not isinstance(output, str):
        raise BadRequest(f"'{at}.output' must be a string or a list of parts", param=f"{at}.output")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


# --- the other fields ------------------------------------------------------------------------


def _tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        kind = tool.get("type")
        if kind != "function":
            raise BadRequest(
                f"tools of type {kind!r} are not supported by the gateway; only function "
                "tools are ({type: function, name, description, parameters, strict})",
                param=f"{at}.type",
            )
        fn: dict[str, Any] = {"name": _string(tool, "name", at)}
        for field, kinds in (("description", str), ("parameters", dict), ("strict", bool)):
            if field in tool:
                value = tool[field]
                if value is not None and not isinstance(value, kinds):
                    raise BadRequest(f"'{at}.{field}' has the wrong type", param=f"{at}.{field}")
                # a chat function has no null description or parameters; null there means
                # what absent means (no description, no parameters), so it is left out
                if value is not None or field == "strict":
                    fn[field] = value
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        if choice not in TOOL_CHOICE_MODES:
            raise BadRequest(
                f"tool_choice must be auto, none, required or a function, not {choice!r}",
                param="tool_choice",
            )
        return choice
    if choice.get("type") != "function":
        raise BadRequest(
            f"tool_choice of type {choice.get('type')!r} is not supported by the gateway; "
            'use {"type": "function", "name": ...} or auto, none, required',
            param="tool_choice.type",
        )
    return {"type": "function", "function": {"name": _string(choice, "name", "tool_choice")}}


def _response_format(fmt: Any) -> dict[str, Any]:
    if not isinstance(fmt, dict):
        raise BadRequest("'text.format' must be an object", param="text.format")
    kind = fmt.get("type")
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind != "json_schema":
        raise BadRequest(
            f"text.format.type must be text, json_object or json_schema, not {kind!r}",
            param="text.format.type",
        )
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise BadRequest("'text.format.schema' must be an object", param="text.format.schema")
    spec: dict[str, Any] = {"name": _string(fmt, "name", "text.format"), "schema": schema}
    for field in ("description", "strict"):
        if field in fmt:
            spec[field] = fmt[field]
    return {"type": "json_schema", "json_schema": spec}


def _reject_unsupported(request: ResponsesRequest) -> None:
    for field, why in REJECTED.items():
        value = getattr(request, field)
        if value is not UNSET and value is not None and value is not False:
            raise BadRequest(why, param=field)


def to_chat(
    request: ResponsesRequest, body: dict[str, Any], history: list[dict[str, Any]]
) -> tuple[ChatRequest, dict[str, Any]]:
    """The canonical chat request (typed, and as the JSON object an OpenAI-compatible
    upstream is sent) for `request`, whose raw JSON is `body`, continuing `history` (the
    items of the previous turns, [] without previous_response_id)."""
    _reject_unsupported(request)
    messages: list[dict[str, Any]] = []
    if isinstance(request.instructions, str):
        messages.append({"role": "system", "content": request.instructions})
    messages += to_messages(history, "previous_response_id")
    messages += to_messages(input_items(request))
    if not messages:
        raise BadRequest("'input' must contain at least one item", param="input")
    chat: dict[str, Any] = {"model": request.model, "messages": messages}
    chat["stream"] = bool(request.stream)
    for field in SAME_NAME:
        if field in body:
            chat[field] = body[field]
    if "max_output_tokens" in body:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    if request.tools:  # chat has no empty tool list: [] means no tools, as absent does
        chat["tools"] = _tools(request.tools)
    if request.tool_choice is not UNSET and request.tool_choice is not None:
        chat["tool_choice"] = _tool_choice(request.tool_choice)
    text = request.text
    if isinstance(text, dict):
        if "format" in text:
            chat["response_format"] = _response_format(text["format"])
        if "verbosity" in text:
            chat["verbosity"] = text["verbosity"]
    reasoning = request.reasoning
    if isinstance(reasoning, dict) and "effort" in reasoning:
        effort = reasoning["effort"]
        if effort is not None and not isinstance(effort, str):
            raise BadRequest("'reasoning.effort' must be a string", param="reasoning.effort")
        chat["reasoning_effort"] = effort
    try:
        return msgspec.convert(chat, ChatRequest), chat
    except msgspec.ValidationError as exc:  # a value the checks above let through
        raise BadRequest(f"The request cannot be translated: {exc}") from None
