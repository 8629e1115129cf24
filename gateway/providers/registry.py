"""The provider kinds of this build: the specs every package of gateway/providers declares
(`SPEC` in its `__init__`), the config union the config file's `providers` are decoded as,
and the lookups the rest of the gateway uses instead of naming a kind.

A kind is found, not listed: adding one is writing its package (config, adapter, optional
embeddings, `SPEC`) with its tests and docs section; nothing else changes
(docs/providers.md, "Adding a provider kind").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING
from typing import Any
from typing import Union

import gateway.providers
from gateway.config_base import ProviderBase
from gateway.errors import BadRequest
from gateway.errors import InternalError
from gateway.providers.base import ProviderAdapter
from gateway.providers.embeddings import EmbeddingsProvider
from gateway.providers.spec import ProviderSpec


def _discovered() -> tuple[ProviderSpec, ...]:
    """Every subpackage's `SPEC`, in name order (the order errors list the kinds in)."""
    specs = []
    for module in sorted(pkgutil.iter_modules(gateway.providers.__path__), key=lambda m: m.name):
        if module.ispkg:
            package = importlib.import_module(f"gateway.providers.{module.name}")
            spec = getattr(package, "SPEC", None)
            if isinstance(spec, ProviderSpec):
                tag = spec.config.__struct_config__.tag
                if spec.kind != module.name or tag != spec.kind:
                    raise InternalError(
                        f"package {module.name!r} declares kind {spec.kind!r} tagged {tag!r}"
                    )
                specs.append(spec)
    return tuple(specs)


SPECS: tuple[ProviderSpec, ...] = _discovered()

if TYPE_CHECKING:
    # What generic code may rely on of any provider; a kind's own fields are its adapter's.
    ProviderConfig = ProviderBase
else:
    # What `providers[]` of the config decodes as: msgspec picks the member by its `kind`.
    ProviderConfig = Union[tuple(spec.config for spec in SPECS)]  # noqa: UP007

KINDS: Mapping[str, ProviderSpec] = MappingProxyType({spec.kind: spec for spec in SPECS})


def spec_of(kind: str) -> ProviderSpec | None:
    return KINDS.get(kind)


def make_adapter(provider: ProviderBase) -> ProviderAdapter:
    spec = KINDS.get(provider.kind)
    if spec is None:
        raise InternalError(
            f"provider {provider.name!r}: kind {provider.kind!r} is not supported by this build"
        )
    adapter: ProviderAdapter = spec.adapter(provider)
    return adapter


def supported_kinds() -> frozenset[str]:
    return frozenset(KINDS)


def kinds_with(capability: str) -> list[str]:
    """The kinds that can serve `capability` (chat, embeddings, count_tokens, continuation)."""
    return [spec.kind for spec in SPECS if capability in spec.capabilities]


def kinds_speaking(api: str) -> list[str]:
    """The kinds whose targets may pick upstream `api` (chat, responses)."""
    return [spec.kind for spec in SPECS if api in spec.config.apis]


def forwards_natively(kind: str, api: str) -> bool:
    """Whether the adapter of `kind` takes client requests of `api` (messages...) as they are."""
    spec = KINDS.get(kind)
    return spec is not None and api in getattr(spec.adapter, "native_apis", frozenset())


def embeddings_provider(provider: ProviderBase) -> EmbeddingsProvider:
    """The embeddings family of `provider`; 400 for a kind that has no embeddings API."""
    spec = KINDS.get(provider.kind)
    if spec is None or spec.embeddings is None:
        raise BadRequest(
            f"provider {provider.name!r} is of kind {provider.kind!r}, which has no "
            f"embeddings API; use a model served by a provider of kind "
            f"{', '.join(kinds_with('embeddings'))}",
            param="model",
            code="embeddings_not_supported",
        )
    family: EmbeddingsProvider = spec.embeddings(provider)
    return family


def provider_config(**fields: Any) -> ProviderConfig:
    """A provider config of `kind` built from its fields (for code and tests that build one
    without a config file)."""
    kind = fields.pop("kind")
    spec = KINDS.get(kind)
    if spec is None:
        raise ValueError(f"unknown provider kind {kind!r}")
    return spec.config(**fields)


def default_providers(env: Mapping[str, str]) -> list[ProviderConfig]:
    """The providers of the built-in default config: each kind's `from_env`."""
    # the kinds that serve a default model come first: they are what the default serves
    ordered = sorted(SPECS, key=lambda spec: spec.config.default_model is None)
    found = [spec.config.from_env(env) for spec in ordered]
    return [p for p in found if p is not None]
