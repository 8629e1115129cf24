"""Everything about a provider kind lives in its package under gateway/providers/: no module
outside it names a kind or reads a field only some kinds have (the AST of every module is
read; nothing is imported to check it), and a kind is added by writing one package."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import msgspec

from gateway.config_base import ProviderBase
from gateway.config_base import ProviderKey
from gateway.providers.registry import SPECS
from gateway.providers.registry import kinds_speaking
from gateway.providers.registry import kinds_with

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "gateway"
KINDS = frozenset(spec.kind for spec in SPECS)
# The inbound Anthropic Messages API's own request headers: the API, not the provider kind
# (a Messages client in front of any provider sends them).
MESSAGES_API_HEADERS = frozenset({"anthropic-beta", "anthropic-version"})


def _kind_only_fields() -> frozenset[str]:
    """The config fields (of a provider or of its keys) that some kinds have and the base
    classes do not: `region`, `credentials_file`, `aws_access_key_id`..."""
    shared = {f.name for f in msgspec.structs.fields(ProviderBase)}
    shared |= {f.name for f in msgspec.structs.fields(ProviderKey)}
    found: set[str] = set()
    for spec in SPECS:
        found |= {f.name for f in msgspec.structs.fields(spec.config)} - shared
        for field in msgspec.structs.fields(spec.config):
            if field.name == "keys":
                (key_type,) = field.type.__args__
                found |= {f.name for f in msgspec.structs.fields(key_type)} - shared
    return frozenset(found)


def _outside_providers() -> list[Path]:
    return [p for p in sorted(GATEWAY.rglob("*.py")) if "providers" not in p.parts]


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def names_a_kind(text: str) -> bool:
    """A string that is a kind's name, or starts with one as a prefix (`anthropic-...`
    headers, `anthropic.` model ids, `openai/` paths). Kinds are lower case; a constant's
    name in `__all__` (`"ANTHROPIC_VERSION"`) is not a kind."""
    if text in MESSAGES_API_HEADERS:
        return False
    return text in KINDS or any(text.startswith(k + sep) for k in KINDS for sep in "-./_")


def kind_mentions(source: str) -> Iterator[tuple[int, str]]:
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    kind_only = _kind_only_fields()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and names_a_kind(node.value):
                yield node.lineno, f"names kind {node.value!r}"
        elif isinstance(node, ast.Attribute) and node.attr in kind_only:
            yield node.lineno, f"reads {node.attr!r}, a field of some kinds only"


def test_the_checker_sees_each_way_of_naming_a_kind() -> None:
    source = textwrap.dedent(
        '''
        """Talks about anthropic in a docstring: fine."""
        HEADER = "anthropic-ratelimit-requests-reset"
        if provider.kind == "vertex" or p.kind in ("bedrock",):
            path = key.credentials_file
        kind = "ollama"
        beta = "anthropic-beta"
        '''
    )
    assert sorted(kind_mentions(source)) == [
        (3, "names kind 'anthropic-ratelimit-requests-reset'"),
        (4, "names kind 'bedrock'"),
        (4, "names kind 'vertex'"),
        (5, "reads 'credentials_file', a field of some kinds only"),
        (6, "names kind 'ollama'"),
    ]


def test_no_module_outside_providers_names_a_kind() -> None:
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in _outside_providers()
        for line, what in kind_mentions(path.read_text(encoding="utf-8"))
    ]
    assert problems == []


def test_every_kind_is_a_package_that_declares_its_spec() -> None:
    packages = {
        p.parent.name for p in (GATEWAY / "providers").glob("*/__init__.py") if p.parent.is_dir()
    }
    assert packages == set(KINDS)
    for spec in SPECS:
        assert spec.config.__module__.startswith(f"gateway.providers.{spec.kind}.")
        assert spec.adapter.__module__.startswith(f"gateway.providers.{spec.kind}.")
        if spec.embeddings is not None:
            assert spec.embeddings.__module__.startswith(f"gateway.providers.{spec.kind}.")


def test_capabilities_follow_from_what_each_package_declares() -> None:
    assert kinds_with("count_tokens") == ["anthropic", "bedrock"]
    assert "anthropic" not in kinds_with("embeddings")
    assert set(kinds_with("embeddings")) == KINDS - {"anthropic"}
    assert kinds_speaking("responses") == kinds_with("continuation") == ["azure", "openai"]
    assert all("chat" in spec.capabilities for spec in SPECS)


# A kind written as one package, outside the tree: an OpenAI-compatible server with its own
# default address and its key in a header of its own.
DEMO_PACKAGE = {
    "__init__.py": '''
        """The `demo` kind: an OpenAI-compatible server with its own address and header."""
        from gateway.providers.demo.adapter import DemoAdapter
        from gateway.providers.demo.config import DemoProvider
        from gateway.providers.spec import ProviderSpec

        SPEC = ProviderSpec(config=DemoProvider, adapter=DemoAdapter)
        ''',
    "config.py": """
        from typing import ClassVar

        from gateway.config_base import ProviderBase


        class DemoProvider(ProviderBase, tag="demo", forbid_unknown_fields=True, kw_only=True,
                           frozen=True):
            kind: ClassVar[str] = "demo"
            tier: str = "standard"

            def default_base_url(self) -> str:
                return "https://api.demo.example/v2"
        """,
    "adapter.py": """
        from gateway.config_base import effective_base_url
        from gateway.providers.base import UpstreamCall, UpstreamRequest
        from gateway.providers.openai.adapter import OpenAIAdapter, upstream_body


        class DemoAdapter(OpenAIAdapter):
            def __init__(self, provider) -> None:
                self._url = effective_base_url(provider) + "/chat/completions"
                self._tier = provider.tier

            def build_request(self, call: UpstreamCall) -> UpstreamRequest:
                headers = {"Content-Type": "application/json", "x-demo-tier": self._tier}
                if call.key is not None and call.key.key:
                    headers["x-demo-key"] = call.key.key.reveal()
                return UpstreamRequest(url=self._url, headers=headers, body=upstream_body(call))
        """,
}

DEMO_RUN = """
import sys
import gateway.providers
gateway.providers.__path__.append(sys.argv[1])

from gateway.config import ConfigError, parse_config
from gateway.providers.base import UpstreamCall
from gateway.providers.registry import make_adapter, supported_kinds
from gateway.wire.openai_chat import ChatRequest

assert "demo" in supported_kinds()
config = parse_config(
    "providers: [{name: d, kind: demo, tier: gold, keys: [{key: dk}]}]\\n"
    "models: [{name: m, targets: [{provider: d, model: demo-1}]}]\\n",
    {},
)
provider = config.providers[0]
chat = ChatRequest(model="m", messages=[])
call = UpstreamCall(request=chat, body={"model": "m", "messages": []}, provider=provider,
                    key=provider.keys[0], model="demo-1", stream=True, request_id="r", now=1.0)
request = make_adapter(provider).build_request(call)
print(request.url, request.headers["x-demo-tier"], request.headers["x-demo-key"])
try:
    parse_config("providers: [{name: o, kind: openai, tier: gold, keys: [{key: k}]}]", {})
except ConfigError as exc:
    print(exc.problems[0])
"""


def test_a_kind_is_added_by_writing_one_package(tmp_path: Path) -> None:
    package = tmp_path / "demo"
    package.mkdir()
    for name, text in DEMO_PACKAGE.items():
        (package / name).write_text(textwrap.dedent(text), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", DEMO_RUN, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "https://api.demo.example/v2/chat/completions gold dk",
        "providers[0].tier: not a field of kind 'openai'",
    ]
