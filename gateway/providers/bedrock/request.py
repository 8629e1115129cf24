"""Canonical chat request -> Bedrock Converse request, sans-IO.

docs/providers.md ("Bedrock") lists every request field and whether it is translated,
ignored (and why) or rejected with a 400; keep the two in step. The rules:

- System and developer messages move to `system`; tool results become `toolResult` blocks
  of a user turn; consecutive turns of one role are merged (Converse wants alternation).
- Bedrock rejects empty text blocks. A `""` text is dropped, never sent and never turned
  into `null`; a turn left with no block is dropped. A `""` tool result is sent with an
  empty `content` list.
- Images must be base64 `data:` URLs (Converse takes bytes, not http URLs).
- `tool_choice: "none"` omits `toolConfig` (Converse has no "none").
"""

from __future__ import annotations

import base64
import binascii
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
from gateway.wire.bedrock import ContentBlock
from gateway.wire.bedrock import ConverseRequest
from gateway.wire.bedrock import Image
from gateway.wire.bedrock import ImageSource
from gateway.wire.bedrock import InferenceConfig
from gateway.wire.bedrock import InputSchema
from gateway.wire.bedrock import Message
from gateway.wire.bedrock import SpecificTool
from gateway.wire.bedrock import SystemBlock
from gateway.wire.bedrock import ToolChoice
from gateway.wire.bedrock import ToolConfig
from gateway.wire.bedrock import ToolDef
from gateway.wire.bedrock import ToolResult
from gateway.wire.bedrock import ToolResultContent
from gateway.wire.bedrock import ToolSpec
from gateway.wire.bedrock import ToolUse
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Message as ChatMessage

IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def _image(url: Any, param: str) -> Image:
    if isinstance(url, str) and url.startswith("data:"):
        header, sep, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        fmt = IMAGE_FORMATS.get(media_type.lower())
        if sep and encoding == "base64" and fmt is not None:
            try:
                base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest("image data is not valid base64", param=param) from None
            return Image(format=fmt, source=ImageSource(bytes=data))
    raise BadRequest(
        "the bedrock provider takes images as base64 data: URLs of png, jpeg, gif or webp",
        param=param,
    )


def _parts(content: Any, param: str, *, images: bool) -> list[ContentBlock]:
    """Text (and image) blocks of a message's content; empty texts are dropped."""
    image = _image_block if images else None
    return [block for block, _ in content_blocks(content, param, "bedrock", _text_block, image)]


def _text_block(text: str) -> ContentBlock:
    return ContentBlock(text=text)


def _image_block(url: Any, param: str) -> ContentBlock:
    return ContentBlock(image=_image(url, param))


def _tool_uses(message: ChatMessage, i: int) -> list[ContentBlock]:
    return [
        ContentBlock(tool_use=ToolUse(tool_use_id=call.id, name=call.function.name, input=parsed))
        for call, parsed in call_inputs(message, i)
    ]


def _tool_result(message: ChatMessage, i: int) -> ContentBlock:
    if message.tool_call_id is UNSET:
        raise BadRequest("a tool message needs tool_call_id", param=f"messages[{i}].tool_call_id")
    content: list[ToolResultContent] = []
    for block in _parts(message.content, f"messages[{i}].content", images=True):
        if block.image is not UNSET:
            content.append(ToolResultContent(image=block.image))
        else:
            content.append(ToolResultContent(text=block.text))
    return ContentBlock(tool_result=ToolResult(tool_use_id=message.tool_call_id, content=content))


def translate_messages(messages: list[ChatMessage]) -> tuple[list[SystemBlock], list[Message]]:
    """(system blocks, alternating turns) for a chat conversation."""
    system, turns = conversation(
        messages,
        "bedrock",
        system=lambda m, param: [
            SystemBlock(text=b.text)
            for b in _parts(m.content, param, images=False)
            if isinstance(b.text, str)
        ],
        user=lambda m, param: _parts(m.content, param, images=True),
        assistant=lambda m, i, param: [
            *_parts(m.content, param, images=False),
            *_tool_uses(m, i),
        ],
        tool=_tool_result,
    )
    return system, [Message(role=role, content=blocks) for role, blocks in turns]


def _tool_config(request: ChatRequest) -> ToolConfig | None:
    tools: list[ToolDef] = []
    for _, fn in function_tools(request, "bedrock"):
        schema = fn.parameters if fn.parameters is not UNSET else _EMPTY_SCHEMA
        spec = ToolSpec(name=fn.name, input_schema=InputSchema(json=schema))
        if isinstance(fn.description, str) and fn.description:
            spec.description = fn.description
        tools.append(ToolDef(tool_spec=spec))
    if not tools:
        return None
    choice = request.tool_choice
    config = ToolConfig(tools=tools)
    if choice is UNSET or choice is None:
        return config  # Bedrock's default is auto
    if choice == "none":
        return None
    if choice == "auto":
        config.tool_choice = ToolChoice(auto={})
    elif choice == "required":
        config.tool_choice = ToolChoice(any={})
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if not isinstance(name, str):
            raise BadRequest("tool_choice.function.name must be a string", param="tool_choice")
        config.tool_choice = ToolChoice(tool=SpecificTool(name=name))
    else:
        raise BadRequest(f"unsupported tool_choice {choice!r}", param="tool_choice")
    return config


def _reject_unsupported(request: ChatRequest) -> None:
    refuse_beyond_one_text_choice(request, "bedrock")
    if request.audio not in (UNSET, None):
        raise BadRequest("the bedrock provider has no audio output", param="audio")
    fmt = request.response_format
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        raise BadRequest(
            f"response_format {fmt.get('type')!r} is not supported by the bedrock provider",
            param="response_format",
        )


def build_converse_request(call: UpstreamCall) -> ConverseRequest:
    """The Converse request for one upstream call (see the module docstring)."""
    request = call.request
    _reject_unsupported(request)
    system, turns = translate_messages(request.messages)
    body = ConverseRequest(messages=turns)
    if system:
        body.system = system
    config = InferenceConfig()
    limit = request.max_completion_tokens
    if limit is UNSET or limit is None:
        limit = request.max_tokens
    if isinstance(limit, int):
        config.max_tokens = limit
    copy_sampling(request, config, MESSAGES_SAMPLING)
    if config != InferenceConfig():
        body.inference_config = config
    tools = _tool_config(request)
    if tools is not None:
        body.tool_config = tools
    return body
