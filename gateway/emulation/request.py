"""Tool calls for models that take no `tools` parameter: the request side.

`emulate_tools` rewrites a chat request for a model configured with `tools: emulate`: the
tools leave the request and are described in a system prompt with the one JSON envelope the
model is to answer with; earlier tool calls and tool results of the conversation become
text (the calls in that same envelope, so the model sees its own format used). The answer
side is `translator.py`. Sans-IO.
"""

from __future__ import annotations

from typing import Any
from typing import NamedTuple

import msgspec
from msgspec import UNSET
from msgspec.structs import replace

from gateway.errors import BadRequest
from gateway.wire import DECODE_ERRORS
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Message
from gateway.wire.openai_chat import ToolCall

ENVELOPE_EXAMPLE = '{"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}]}'
_TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call")
_decode = msgspec.json.decode
_encode = msgspec.json.encode


class ToolEmulation(msgspec.Struct, frozen=True):
    """What the answer side needs: the tool names a reply may call (empty: do not look)."""

    names: frozenset[str]


class Emulated(NamedTuple):
    request: ChatRequest
    body: dict[str, Any]
    emulation: ToolEmulation | None


def emulate_tools(request: ChatRequest, body: dict[str, Any]) -> Emulated:
    """The request as a model without tools is to see it (unchanged if it has no tools and
    no tool history)."""
    tools = _function_tools(request)
    history = any(m.role in ("tool", "function") or m.tool_calls for m in request.messages)
    if not tools and not history:
        return Emulated(request, body, None)
    choice, names = _tool_choice(request.tool_choice, tools)
    messages, raw = _render_history(request.messages, body.get("messages"))
    if names:
        prompt = _system_prompt(tools, choice, names, request.parallel_tool_calls is False)
        messages, raw = _with_system_prompt(messages, raw, prompt)
    new_body = {k: v for k, v in body.items() if k not in _TOOL_FIELDS}
    new_body["messages"] = raw
    typed = replace(
        request, messages=messages, tools=UNSET, tool_choice=UNSET, parallel_tool_calls=UNSET
    )
    return Emulated(typed, new_body, ToolEmulation(names) if names else None)


def _function_tools(request: ChatRequest) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(request.tools or ()):
        if tool.type != "function" or tool.function is UNSET:
            raise BadRequest(
                f"tools[{i}]: only function tools can be emulated (type {tool.type!r})",
                param=f"tools[{i}].type",
            )
        fn = tool.function
        entry: dict[str, Any] = {"name": fn.name}
        if fn.description:
            entry["description"] = fn.description
        entry["parameters"] = fn.parameters if fn.parameters else {"type": "object"}
        out.append(entry)
    return out


def _tool_choice(choice: Any, tools: list[dict[str, Any]]) -> tuple[str, frozenset[str]]:
    """("none" | "auto" | "required" | "named", the names a reply may call)."""
    names = frozenset(t["name"] for t in tools)
    if choice is UNSET or choice is None:
        choice = "auto"
    if choice == "none" or not tools:
        return "none", frozenset()
    if choice in ("auto", "required"):
        return choice, names
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if isinstance(name, str) and name in names:
            return "named", frozenset({name})
        raise BadRequest(
            f"tool_choice names the function {name!r}, which is not in 'tools'",
            param="tool_choice",
        )
    raise BadRequest(
        "tool_choice must be 'none', 'auto', 'required' or a function: "
        '{"type": "function", "function": {"name": ...}}',
        param="tool_choice",
    )


def _system_prompt(
    tools: list[dict[str, Any]], choice: str, names: frozenset[str], one_call: bool
) -> str:
    listing = "\n".join(_encode(t).decode() for t in tools)
    lines = [
        "You can call tools. Each tool is one line of JSON below: its name, what it does, "
        "and its parameters as a JSON Schema.",
        "<tools>",
        listing,
        "</tools>",
        "To call tools, answer with exactly one JSON object of this form, and nothing after it:",
        ENVELOPE_EXAMPLE,
        'Use only tool names from the list; "arguments" is a JSON object that matches the '
        "tool's parameters. The results of your calls come in the next message.",
    ]
    if one_call:
        lines.append('Call at most one tool: the "tool_calls" list has one entry.')
    else:
        lines.append('Several independent calls go into the one "tool_calls" list.')
    if choice == "auto":
        lines.append("If no tool is needed, answer in plain text without that JSON object.")
    elif choice == "required":
        lines.append("You must call at least one tool in this answer.")
    else:
        (name,) = names
        lines.append(f'You must call the tool "{name}" in this answer.')
    return "\n".join(lines)


def _render_history(
    messages: list[Message], raw: Any
) -> tuple[list[Message], list[dict[str, Any]]]:
    """Tool calls and results of earlier turns as text: typed messages and the JSON objects
    forwarded to OpenAI-compatible upstreams (untouched messages keep the client's object,
    with whatever fields it had)."""
    raw_list: list[Any] = raw if isinstance(raw, list) else []
    names = {call.id: call.function.name for m in messages if m.tool_calls for call in m.tool_calls}
    typed: list[Message] = []
    out: list[dict[str, Any]] = []
    results_last = False  # consecutive tool results become one user message
    for i, message in enumerate(messages):
        if message.role in ("tool", "function"):
            result = _result_text(message, names)
            if results_last:
                result = f"{typed.pop().content}\n\n{result}"
                out.pop()
            typed.append(Message(role="user", content=result))
            out.append({"role": "user", "content": result})
            results_last = True
            continue
        results_last = False
        if message.role == "assistant" and message.tool_calls:
            text = _calls_text(message)
            typed.append(Message(role="assistant", content=text))
            out.append({"role": "assistant", "content": text})
        else:
            typed.append(message)
            original = raw_list[i] if i < len(raw_list) else None
            out.append(original if isinstance(original, dict) else msgspec.to_builtins(message))
    return typed, out


def _calls_text(message: Message) -> str:
    calls = [
        {"name": call.function.name, "arguments": _arguments(call)}
        for call in message.tool_calls or ()
    ]
    envelope = _encode({"tool_calls": calls}).decode()
    before = _text_of(message.content)
    return f"{before}\n\n{envelope}" if before else envelope


def _arguments(call: ToolCall) -> Any:
    try:
        value = _decode(call.function.arguments or "{}")
    except DECODE_ERRORS:
        return call.function.arguments  # what the client sent, kept as a string
    return value


def _result_text(message: Message, names: dict[str, str]) -> str:
    call_id = message.tool_call_id if message.tool_call_id is not UNSET else ""
    name = names.get(call_id) or (message.name if message.name is not UNSET else "") or "tool"
    return f"Result of the tool call {name} ({call_id}):\n{_text_of(message.content)}"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _with_system_prompt(
    messages: list[Message], raw: list[dict[str, Any]], prompt: str
) -> tuple[list[Message], list[dict[str, Any]]]:
    """The tool prompt joins the client's leading system message when it is plain text
    (some upstreams take one system message only), else it goes first on its own."""
    first = messages[0] if messages else None
    if (
        first is not None
        and first.role in ("system", "developer")
        and isinstance(first.content, str)
    ):
        content = f"{first.content}\n\n{prompt}" if first.content else prompt
        raw = [{**raw[0], "content": content}, *raw[1:]]
        return [replace(first, content=content), *messages[1:]], raw
    return (
        [Message(role="system", content=prompt), *messages],
        [{"role": "system", "content": prompt}, *raw],
    )
