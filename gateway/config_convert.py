"""The config tree to typed Structs one field and one list item at a time, because msgspec
stops at the first error and we want all of them. A part that fails becomes `BAD` (its
problem is recorded) and the rest goes on, so semantic checks can still run on what did
convert. A union of tagged Structs (the providers, by `kind`) is converted as the member its
tag names, and its problems name the kind. Never quotes a value. Imports nothing from the
gateway but config_parse's types.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any
from typing import Literal

import msgspec

from gateway.config_parse import BAD
from gateway.config_parse import DecHook
from gateway.config_parse import Path
from gateway.config_parse import Problem
from gateway.config_parse import kind_of

_AT = re.compile(r" - at `\$[^`]*`$")
_EXPECTED = re.compile(r"Expected `(?P<want>[^`]+)`, got `(?P<got>[^`]+)`")
_WORDS = {"object": "mapping", "array": "list"}


def _word(msgspec_type: str) -> str:
    return " or ".join(_WORDS.get(part, part) for part in msgspec_type.split(" | "))


def translate(message: str) -> str:
    """A msgspec ValidationError message in our words, without its `$.path` suffix."""
    message = _AT.sub("", message)
    if match := _EXPECTED.fullmatch(message):
        return f"expected {_word(match['want'])}, got {_word(match['got'])}"
    message = message.replace("`", "")
    return message[:1].lower() + message[1:]


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _is_container(tp: Any) -> bool:
    return _is_struct(tp) or typing.get_origin(tp) is list


def convert(
    value: Any,
    tp: Any,
    path: Path,
    problems: list[Problem],
    dec_hook: DecHook,
    tag: str | None = None,
) -> Any:
    """Convert `value` to `tp`, appending a problem for every part that does not fit.

    Returns the converted value, or `BAD` when this part failed. A Struct with a bad optional
    field is built with that field's default; a list keeps `BAD` in place of a bad item so that
    indices in later problems still match the file. Scalars are converted with
    `strict=False`, so `"8080"` (say from `${PORT:-8080}`) becomes an int.
    """
    if value is BAD:  # already reported (e.g. a missing environment variable)
        return BAD
    origin = typing.get_origin(tp)
    if _is_struct(tp):
        return _convert_struct(value, tp, path, problems, dec_hook, tag=tag)
    if origin is list:
        if not isinstance(value, list):
            problems.append((path, f"expected list, got {kind_of(value)}"))
            return BAD
        (item_type,) = typing.get_args(tp)
        return [
            convert(item, item_type, (*path, i), problems, dec_hook, tag)
            for i, item in enumerate(value)
        ]
    if origin in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        if len(members) > 1 and all(_tag_field(m) for m in members):
            return _convert_tagged(value, members, path, problems, dec_hook)
        if value is None and len(members) < len(typing.get_args(tp)):
            return None
        if len(members) == 1:
            return convert(value, members[0], path, problems, dec_hook, tag)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if isinstance(value, str) and value in allowed:
            return value
        problems.append((path, "must be one of " + ", ".join(map(str, allowed))))
        return BAD
    try:
        return msgspec.convert(value, tp, strict=False, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        problems.append((path, translate(str(exc))))
        return BAD


def _tag_field(tp: Any) -> str | None:
    return tp.__struct_config__.tag_field if _is_struct(tp) else None


def _convert_tagged(
    value: Any, members: list[Any], path: Path, problems: list[Problem], dec_hook: DecHook
) -> Any:
    """A union of tagged Structs (the providers, by `kind`): the member its tag names."""
    if not isinstance(value, dict):
        problems.append((path, f"expected mapping, got {kind_of(value)}"))
        return BAD
    field = _tag_field(members[0])
    assert field is not None
    by_tag = {m.__struct_config__.tag: m for m in members}
    tag = value.get(field)
    if field not in value:
        problems.append(((*path, field), "missing required field"))
        return BAD
    if not isinstance(tag, str) or tag not in by_tag:
        problems.append(((*path, field), "must be one of " + ", ".join(map(str, by_tag))))
        return BAD
    return _convert_struct(value, by_tag[tag], path, problems, dec_hook, tag=str(tag))


def _convert_struct(
    value: Any,
    tp: type[msgspec.Struct],
    path: Path,
    problems: list[Problem],
    dec_hook: DecHook,
    *,
    tag: str | None = None,
) -> Any:
    """`tag`: the struct is, or is inside, one chosen by its tag (a provider's kind), which
    the problems name (a field another kind takes is "not a field of kind 'x'", a missing
    one "required for kind 'x'")."""
    if not isinstance(value, dict):
        problems.append((path, f"expected mapping, got {kind_of(value)}"))
        return BAD
    fields = msgspec.structs.fields(tp)
    known = {field.encode_name for field in fields}
    tag_field = tp.__struct_config__.tag_field
    if tag_field is not None:
        known.add(tag_field)
    unknown = "unknown field" if tag is None else f"not a field of kind '{tag}'"
    problems.extend(((*path, str(key)), unknown) for key in value if key not in known)
    kwargs: dict[str, Any] = {}
    complete = True
    for field in fields:
        where = (*path, field.encode_name)
        if field.encode_name not in value:
            if field.required:
                missing = "missing required field" if tag is None else f"required for kind '{tag}'"
                problems.append((where, missing))
                complete = False
            continue
        raw = value[field.encode_name]
        if raw is None and _is_container(field.type):
            # A section or list whose lines are all commented out: its defaults.
            raw = {} if _is_struct(field.type) else []
        # a kind's own item types (its keys) name it too; a shared section (timeouts) not
        item_tag = tag if typing.get_origin(field.type) is list else None
        converted = convert(raw, field.type, where, problems, dec_hook, item_tag)
        if converted is BAD:
            complete = complete and not field.required
        else:
            kwargs[field.name] = converted
    return tp(**kwargs) if complete else BAD
