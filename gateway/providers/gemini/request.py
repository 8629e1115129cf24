"""OpenAI chat request -> Gemini `GenerateContentRequest`, sans-IO.

Every OpenAI field is translated, ignored (with a reason) or rejected with a 400; the list
is in docs/providers.md ("Gemini"). The rules that need care:
- Gemini rejects a text part that is `""`: empty text parts are dropped, and a turn left
  with no parts is dropped too (turns need not alternate; neighbours of the same role are
  merged). If no turn is left at all, one `user` turn with a single space is sent so the
  request stays valid. The client's `""` is never turned into `null` or into a refusal.
- `tool` results become `functionResponse` parts in a `user` turn; Gemini wants the
  function's name, which OpenAI leaves out, so it is looked up by `tool_call_id` in the
  earlier assistant `tool_calls`.
- JSON schemas (tool parameters, response_format json_schema) are cut down to the OpenAPI
  subset Gemini's `Schema` accepts (see `gemini_schema`).
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec
from msgspec import UNSET

from gateway.errors import BadRequest
from gateway.inbound.client_urls import refusal
from gateway.inbound.client_urls import url_allowed
from gateway.providers.base import UpstreamCall
from gateway.providers.translate import arguments_object
from gateway.providers.translate import copy_sampling
from gateway.providers.translate import given
from gateway.providers.translate import refuse_beyond_one_text_choice
from gateway.wire import DECODE_ERRORS
from gateway.wire import gemini as g
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Message

# reasoning_effort -> thinking budget in tokens (`none`/`minimal` turn thinking off where
# the model allows it; Gemini 2.5 Pro and 3 answer 400 to a zero budget).
THINKING_BUDGETS = {"none": 0, "minimal": 0, "low": 1024, "medium": 8192, "high": 24576}

# The JSON-schema keywords Gemini's OpenAPI-style `Schema` accepts; everything else
# (`additionalProperties`, `$schema`, `$id`, `$ref`, `$defs`, `strict`, `const`, ...) is
# dropped, because Gemini answers 400 to an unknown keyword.
SCHEMA_KEYS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "items",
        "minItems",
        "maxItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "anyOf",
        "propertyOrdering",
        "default",
        "example",
    }
)

_MIME_BY_EXTENSION = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "gif": "image/gif",
    "webp": "image/webp",
    "heic": "image/heic",
    "heif": "image/heif",
    "pdf": "application/pdf",
}
_AUDIO_MIME = {"wav": "audio/wav", "mp3": "audio/mp3"}
_json_decoder = msgspec.json.Decoder()


def gemini_schema(schema: Any) -> Any:
    """A JSON schema cut down to what Gemini accepts: unknown keywords dropped, `type`
    upper-cased, `["string", "null"]` types turned into `nullable`, `const` into `enum`."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "const" and "enum" not in schema:
            out["enum"] = [value]
        elif key not in SCHEMA_KEYS:
            continue
        elif key == "type":
            out.update(_schema_type(value))
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: gemini_schema(sub) for name, sub in value.items()}
        elif key == "items":
            out[key] = gemini_schema(value)
        elif key == "anyOf" and isinstance(value, list):
            out[key] = [gemini_schema(sub) for sub in value]
        else:
            out[key] = value
    return out


def _schema_type(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"type": value.upper()}
    if isinstance(value, list):
        kinds = [k for k in value if isinstance(k, str) and k != "null"]
        out: dict[str, Any] = {"type": kinds[0].upper()} if kinds else {}
        if "null" in value:
            out["nullable"] = True
        return out
    return {}


# --- messages ----------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """The text of string content or of the text parts of array content."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _data_url(url: str, param: str) -> g.Blob:
    header, sep, data = url.partition(",")
    if not sep or ";base64" not in header:
        raise BadRequest("only base64 data: URLs are supported", param=param)
    return g.Blob(mime_type=header[5:].split(";", 1)[0] or "application/octet-stream", data=data)


def _guess_mime(url: str) -> str:
    path = url.split("?", 1)[0].split("#", 1)[0]
    ext = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    return _MIME_BY_EXTENSION.get(ext, "image/jpeg")


def _content_part(part: Any, param: str, storage_uris: bool) -> g.Part | None:
    """One OpenAI content part; None for an empty text part. A URL that is neither http(s)
    nor data: (`gs://`) becomes a `fileUri` only where the provider allows storage URIs:
    Google reads it with the gateway project's identity. The inbound layer refuses these
    first; this holds for any other way a request reaches here."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        text = part.get("text")
        return g.Part(text=text) if isinstance(text, str) and text else None
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str):
            raise BadRequest("image_url needs a url", param=param)
        if url.startswith("data:"):
            return g.Part(inline_data=_data_url(url, param))
        if not storage_uris and not url_allowed(url):
            raise refusal(f"{param}.image_url" + (".url" if isinstance(image, dict) else ""))
        return g.Part(file_data=g.FileData(file_uri=url, mime_type=_guess_mime(url)))
    if kind == "input_audio":
        audio = part.get("input_audio") or {}
        mime = _AUDIO_MIME.get(str(audio.get("format")), "audio/wav")
        return g.Part(inline_data=g.Blob(mime_type=mime, data=str(audio.get("data", ""))))
    if kind == "file":
        data = (part.get("file") or {}).get("file_data")
        if isinstance(data, str) and data.startswith("data:"):
            return g.Part(inline_data=_data_url(data, param))
        raise BadRequest("file parts need file_data as a base64 data: URL", param=param)
    raise BadRequest(f"content part type {kind!r} is not supported by Gemini", param=param)


def _parts(content: Any, param: str, storage_uris: bool) -> list[g.Part]:
    if isinstance(content, str):
        return [g.Part(text=content)] if content else []
    if isinstance(content, list):
        parts = [_content_part(p, f"{param}[{i}]", storage_uris) for i, p in enumerate(content)]
        return [p for p in parts if p is not None]
    return []


def _function_response(message: Message, name: str) -> g.Part:
    text = _text_of(message.content)
    response: dict[str, Any] = {"content": text}
    if text.lstrip().startswith("{"):
        try:
            parsed = _json_decoder.decode(text)
        except DECODE_ERRORS:
            parsed = None
        if isinstance(parsed, dict):
            response = parsed
    return g.Part(function_response=g.FunctionResponse(name=name, response=response))


_SIGNED = "gts"


def signed_call_id(base: str, signature: str | None) -> str:
    """The tool-call id a client sees for a Gemini function call, carrying the call's
    `thoughtSignature` when it has one: Gemini 3 wants the signature back on that call in
    later turns, and the client sends back only the id. Stateless, and within
    `[A-Za-z0-9_-]` so every provider accepts it: `gts<length>_<base64url>_<base>`."""
    if not signature:
        return base
    token = base64.urlsafe_b64encode(signature.encode()).decode().rstrip("=")
    return f"{_SIGNED}{len(token)}_{token}_{base}"


def signature_of(call_id: str) -> str | None:
    """The `thoughtSignature` carried by an id from `signed_call_id`, else None."""
    if not call_id.startswith(_SIGNED):
        return None
    digits, sep, rest = call_id[len(_SIGNED) :].partition("_")
    if not sep or not (digits.isascii() and digits.isdigit()):  # int("²") raises
        return None
    size = int(digits)
    token = rest[:size]
    if len(token) != size or rest[size : size + 1] != "_":
        return None
    try:
        return base64.urlsafe_b64decode(token + "=" * (-size % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def translate_messages(
    messages: list[Message], storage_uris: bool = False
) -> tuple[g.Content | None, list[g.Content]]:
    """(systemInstruction, contents) for the chat messages; `storage_uris`: the provider's
    `allow_storage_uris`."""
    system: list[g.Part] = []
    turns: list[tuple[str, list[g.Part]]] = []
    names: dict[str, str] = {}  # tool_call_id -> function name
    for i, m in enumerate(messages):
        param = f"messages[{i}]"
        role = "user"
        if m.role in ("system", "developer"):
            text = _text_of(m.content)
            if text:
                system.append(g.Part(text=text))
            continue
        if m.role == "user":
            parts = _parts(m.content, param + ".content", storage_uris)
        elif m.role == "assistant":
            role = "model"
            parts = _parts(m.content, param + ".content", storage_uris)
            for j, tc in enumerate(m.tool_calls or ()):
                names[tc.id] = tc.function.name
                args = arguments_object(tc.function.arguments, f"{param}.tool_calls[{j}]")
                call = g.FunctionCall(name=tc.function.name, args=args)
                signature = signature_of(tc.id)
                if signature is None:
                    parts.append(g.Part(function_call=call))
                else:
                    parts.append(g.Part(function_call=call, thought_signature=signature))
        else:  # tool, or the legacy `function` role that names itself
            call_id = m.tool_call_id if m.tool_call_id is not UNSET else None
            name = names.get(call_id) if call_id is not None else None
            if name is None and m.name is not UNSET:
                name = m.name
            if name is None:
                raise BadRequest(
                    "a tool message must answer a tool call of an earlier assistant message",
                    param=param + ".tool_call_id",
                )
            parts = [_function_response(m, name)]
        if not parts:
            continue  # an empty turn: Gemini rejects a turn without parts
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(parts)
        else:
            turns.append((role, parts))
    contents = [g.Content(role=role, parts=parts) for role, parts in turns]
    if not contents:
        contents = [g.Content(role="user", parts=[g.Part(text=" ")])]
    return (g.Content(parts=system) if system else None), contents


# --- tools and generation config -----------------------------------------------------------


def translate_tools(request: ChatRequest) -> list[g.Tool] | None:
    declarations = []
    for t in request.tools or ():
        if t.type != "function" or not t.function:
            continue  # Gemini has no equivalent of other OpenAI tool types
        fn = t.function
        decl = g.FunctionDeclaration(name=fn.name, description=fn.description)
        params = fn.parameters
        # Gemini rejects an OBJECT schema without properties: a tool without arguments
        # is declared without `parameters`.
        if params and params.get("properties"):
            decl.parameters = gemini_schema(params)
        declarations.append(decl)
    return [g.Tool(function_declarations=declarations)] if declarations else None


def translate_tool_choice(choice: Any) -> g.ToolConfig | None:
    if choice is None or choice is UNSET:
        return None
    modes = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
    if isinstance(choice, str) and choice in modes:
        return g.ToolConfig(g.FunctionCallingConfig(mode=modes[choice]))
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if isinstance(name, str) and name:
            return g.ToolConfig(g.FunctionCallingConfig(mode="ANY", allowed_function_names=[name]))
    raise BadRequest("tool_choice must be auto, none, required or a function", param="tool_choice")


def _response_format(config: g.GenerationConfig, fmt: dict[str, Any]) -> None:
    kind = fmt.get("type")
    if kind == "json_object":
        config.response_mime_type = "application/json"
    elif kind == "json_schema":
        config.response_mime_type = "application/json"
        schema = (fmt.get("json_schema") or {}).get("schema")
        if isinstance(schema, dict):
            config.response_schema = gemini_schema(schema)
    elif kind != "text":
        raise BadRequest(f"response_format type {kind!r} is not supported", param="response_format")


# the chat sampling parameters Gemini takes, by its names for them
SAMPLING = {
    "temperature": "temperature",
    "top_p": "top_p",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "stop": "stop_sequences",
    "seed": "seed",
}


def generation_config(request: ChatRequest) -> g.GenerationConfig | None:
    r = request
    refuse_beyond_one_text_choice(r, "Gemini")
    config = g.GenerationConfig()
    max_tokens = r.max_completion_tokens if r.max_completion_tokens else r.max_tokens
    if max_tokens:
        config.max_output_tokens = max_tokens
    copy_sampling(r, config, SAMPLING)
    if isinstance(r.response_format, dict):
        _response_format(config, r.response_format)
    effort = r.reasoning_effort
    if isinstance(effort, str):
        budget = THINKING_BUDGETS.get(effort)
        if budget is None:
            raise BadRequest(
                f"reasoning_effort {effort!r} is not one of {', '.join(THINKING_BUDGETS)}",
                param="reasoning_effort",
            )
        config.thinking_config = g.ThinkingConfig(
            thinking_budget=budget, include_thoughts=True if budget else UNSET
        )
    return config if config != g.GenerationConfig() else None


def build_body(call: UpstreamCall) -> bytes:
    """The JSON body of the Gemini request for this call."""
    request = call.request
    system, contents = translate_messages(request.messages, call.provider.allow_storage_uris)
    body = g.GenerateContentRequest(
        contents=contents,
        system_instruction=given(system),
        tools=given(translate_tools(request)),
        tool_config=given(translate_tool_choice(request.tool_choice)),
        generation_config=given(generation_config(request)),
    )
    return g.encoder.encode(body)
