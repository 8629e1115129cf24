"""From config text to typed Structs, collecting every problem with its path in the file.

Owns the steps that know nothing about the gateway's schema (the Struct types and the
`dec_hook` for custom leaf types are passed in):

1. `read_tree`: YAML through a safe loader (dates stay strings, duplicate keys and recursive
   aliases are reported), then `${VAR}` / `${VAR:-default}` / `$${` interpolation of every
   string value; it also records where each path is, so `in_file_order` can sort problems.
2. `convert` (config_convert.py): the tree to Structs, every problem collected.
3. `format_problem`: `(path, message)` to `"models[2].targets[0].provider: message"`.

The messages made here never quote a value: a value may have come from a secret.
Imports nothing from the gateway.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from typing import Any
from typing import Final
from typing import NamedTuple

import yaml

Path = tuple[str | int, ...]
Problem = tuple[Path, str]
Position = tuple[int, int]  # line, column; both from 1
DecHook = typing.Callable[[type, Any], Any]


class _Bad:
    """The type of `BAD`: a part of the tree that could not be converted."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "BAD"


# Typed Any so checks can compare any field against it without a cast.
BAD: Final[Any] = _Bad()


def is_bad(value: object) -> bool:
    """True for a part of a partially converted config that failed (its problem is recorded)."""
    return value is BAD


def format_path(path: Path) -> str:
    """`("models", 2, "targets")` -> `"models[2].targets"`."""
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        else:
            out.append(f".{part}" if out else part)
    return "".join(out)


def format_problem(problem: Problem, source: str) -> str:
    """`"<path>: <message>"`; a problem about the whole file uses `source` as its path."""
    path, message = problem
    return f"{format_path(path) or source}: {message}"


def kind_of(value: object) -> str:
    """The YAML word for a value's type, as used in "expected X, got Y"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


# --- YAML ----------------------------------------------------------------------------------

_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_MERGE_TAG = "tag:yaml.org,2002:merge"


_MAX_NODES = 200_000


class _TooBig(Exception):
    """The document expands (through aliases) to more than _MAX_NODES values."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps dates as strings and remembers duplicate keys per mapping.

    `api_version: 2024-10-21` must stay the string the provider expects, not a `date`. The
    duplicates are keyed by the id of the dict built for the mapping; the loader is made per
    call and the dicts live in its result, so the ids stay valid while the tree is walked.
    It also carries the walk's state: the containers being walked (to catch recursive
    aliases) and a budget of values (to stop alias bombs).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: dict[int, list[tuple[Any, int]]] = {}
        self.open_containers: set[int] = set()  # ids of the lists and dicts being walked
        self.budget = _MAX_NODES  # aliases can make a small file a huge tree ("billion laughs")

    def spend(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise _TooBig

    def _construct_map(self, node: yaml.MappingNode) -> typing.Iterator[dict[Any, Any]]:
        data: dict[Any, Any] = {}
        yield data
        seen: set[Any] = set()
        dups: list[tuple[Any, int]] = []
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node)
            if isinstance(key, typing.Hashable):
                if key in seen:
                    dups.append((key, key_node.start_mark.line + 1))
                seen.add(key)
        data.update(self.construct_mapping(node))
        if dups:
            self.duplicates[id(data)] = dups


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_constructor("tag:yaml.org,2002:map", _Loader._construct_map)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    # Only the parser's words and the position: str(exc) would quote the offending line.
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        words = exc.problem or exc.context or "invalid YAML"
        return f"line {mark.line + 1}, column {mark.column + 1}: {words}"
    return "invalid YAML"


# --- interpolation -------------------------------------------------------------------------

_REF = re.compile(r"\$\$\{|\$\{(?P<body>[^}]*)\}|\$\{")
_BODY = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?", re.DOTALL)


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Expand `${VAR}`, `${VAR:-default}` and `$${` in one string value.

    The default is used when VAR is unset or empty, as in the shell; it is taken literally
    (no nested references). Raises ValueError with a message that quotes no value.
    """

    def expand(match: re.Match[str]) -> str:
        whole, body = match.group(0), match.group("body")
        if whole == "$${":
            return "${"
        if body is None:
            raise ValueError("unterminated '${' (write '$${' for a literal '${')")
        ref = _BODY.fullmatch(body)
        if ref is None:
            raise ValueError("invalid reference: expected ${NAME} or ${NAME:-default}")
        name, default = ref.group("name"), ref.group("default")
        value = env.get(name)
        if default is not None:
            return value if value else default
        if value is None:
            raise ValueError(f"environment variable {name} is not set")
        return value

    return _REF.sub(expand, text) if "${" in text else text


def _walk(
    node: Any, path: Path, env: Mapping[str, str], loader: _Loader, problems: list[Problem]
) -> Any:
    loader.spend()
    if isinstance(node, str):
        try:
            return interpolate(node, env)
        except ValueError as exc:
            problems.append((path, str(exc)))
            return BAD
    if isinstance(node, list | dict):
        if id(node) in loader.open_containers:
            problems.append((path, "recursive alias"))
            return BAD
        loader.open_containers.add(id(node))
        try:
            return _walk_container(node, path, env, loader, problems)
        finally:
            loader.open_containers.discard(id(node))
    return node


def _walk_container(
    node: list[Any] | dict[Any, Any],
    path: Path,
    env: Mapping[str, str],
    loader: _Loader,
    problems: list[Problem],
) -> Any:
    if isinstance(node, list):
        return [_walk(item, (*path, i), env, loader, problems) for i, item in enumerate(node)]
    for key, line in loader.duplicates.get(id(node), []):
        problems.append(((*path, str(key)), f"duplicate key (again on line {line})"))
    return {
        key: _walk(value, (*path, str(key)), env, loader, problems) for key, value in node.items()
    }


def _positions(
    loader: _Loader, node: yaml.Node, path: Path, out: dict[Path, Position], open_nodes: set[int]
) -> None:
    """Record where each path starts in the file (the first occurrence of a duplicate key)."""
    loader.spend()
    if path in out or id(node) in open_nodes:  # a duplicate key, or a recursive alias
        return
    out[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    open_nodes.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _positions(loader, item, (*path, i), out, open_nodes)
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = loader.construct_object(key_node)
                _positions(loader, value_node, (*path, str(key)), out, open_nodes)
    open_nodes.discard(id(node))


class Tree(NamedTuple):
    """The interpolated YAML document, its problems so far, and where each path starts."""

    value: Any
    problems: list[Problem]
    positions: dict[Path, Position]


def read_tree(text: str, env: Mapping[str, str]) -> Tree:
    """Parse YAML and interpolate string values; an empty document is `{}`.

    After a YAML syntax error the value is `BAD` and the only problem is the syntax error.
    A string whose interpolation failed is replaced by `BAD`.
    """
    loader = _Loader(text)
    positions: dict[Path, Position] = {}
    problems: list[Problem] = []
    try:
        node = loader.get_single_node()
        if node is None:
            return Tree({}, problems, positions)
        raw = loader.construct_document(node)
        _positions(loader, node, (), positions, set())
        value = _walk(raw, (), env, loader, problems)
    except yaml.YAMLError as exc:
        return Tree(BAD, [((), _yaml_problem(exc))], positions)
    except _TooBig:
        return Tree(BAD, [((), f"more than {_MAX_NODES} values once aliases are expanded")], {})
    finally:
        loader.dispose()
    return Tree(value, problems, positions)


def in_file_order(problems: list[Problem], positions: Mapping[Path, Position]) -> list[Problem]:
    """Sort problems by where their path (or its nearest written ancestor) is in the file.

    Problems about the whole file come first; ties keep their order.
    """

    def where(problem: Problem) -> Position:
        path = problem[0]
        while path and path not in positions:
            path = path[:-1]
        return positions.get(path, (0, 0)) if path else (0, 0)

    return sorted(problems, key=where)


# --- conversion ----------------------------------------------------------------------------
