"""The parts of the config every provider kind's own config is made of: `Secret`, the
provider key, the timeouts, and `ProviderBase`, the tagged Struct each kind extends.

A provider kind declares its config in its own package (gateway/providers/<kind>/config.py)
as a subclass of `ProviderBase` tagged with the kind's name; `gateway.config` decodes the
`providers` list as the union of those (msgspec picks the class from `kind`). So the fields a
kind requires are required fields of its class, the fields it alone takes exist only on its
class (anywhere else they are an unknown field), and its other rules are its `problems()`.
This module imports nothing from the rest of the gateway but `config_parse`'s path types.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from collections.abc import Mapping
from typing import ClassVar

import msgspec

from gateway.config_parse import Path
from gateway.config_parse import Problem


class Secret:
    """A credential whose repr and str hide it; `.reveal()` is the only way to read it.

    Compares (in constant time) and hashes on the value, is truthy when non-empty, and is
    never quoted in an error message.
    """

    __slots__ = ("_value",)
    _value: str

    def __init__(self, value: str) -> None:
        object.__setattr__(self, "_value", value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Secret is immutable")

    def reveal(self) -> str:
        """The secret value itself: only for the one place that sends it upstream."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))


class ProviderKey(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One credential of a provider; a provider's keys are balanced by weight. A kind with
    other credential forms extends it (Bedrock's SigV4 pair, Vertex's credentials file)."""

    key: Secret | None = None
    name: str | None = None  # shown by /admin/health and in logs instead of a fingerprint
    weight: int = 1
    rpm: int | None = None
    tpm: int | None = None

    def secrets(self) -> list[Secret]:
        """Every secret this key holds: what logs and error messages must never show."""
        return [s for s in (self.key,) if s]

    def identity(self) -> str:
        """What names this key (hashed into its fingerprint): its main credential."""
        return self.key.reveal() if self.key else ""


class Timeouts(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The named timeouts of one upstream attempt, in seconds."""

    connect_s: float = 5.0
    first_byte_s: float = 60.0
    idle_s: float = 60.0  # longest silence between two upstream bytes
    total_s: float = 600.0


class ProviderBase(
    msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True, tag_field="kind"
):
    """An upstream: where it is and its keys. Each kind subclasses it with `tag=<kind>`."""

    # What the kind is and what it offers the config (set by each subclass)
    kind: ClassVar[str]
    keyless: ClassVar[bool] = False  # True: keys are optional (a self-hosted server)
    apis: ClassVar[frozenset[str]] = frozenset({"chat"})  # a target's `api` values
    env_key: ClassVar[str | None] = None  # served by the built-in default when this is set
    default_model: ClassVar[str | None] = None  # a model the built-in default serves
    default_url: ClassVar[str | None] = None  # where the kind's SDK goes without `base_url`

    name: str
    base_url: str | None = None
    keys: list[ProviderKey] = []
    timeouts: Timeouts = Timeouts()
    # client image/file URLs other than http(s) and data: (gs://, s3://...) are read with the
    # gateway's cloud identity: refused unless the operator allows them for this provider
    allow_storage_uris: bool = False

    def default_base_url(self) -> str:
        """Where the kind's SDK sends requests when no `base_url` is set (`default_url`, or
        a kind's own method where it depends on its fields)."""
        if self.default_url is None:
            raise ValueError(f"provider {self.name!r}: kind {self.kind} needs a base_url")
        return self.default_url

    def problems(self) -> Iterator[Problem]:
        """The kind's own rules beyond its types, as (path under this provider, message)."""
        if not self.keys and not self.keyless:
            yield ("keys",), f"kind '{self.kind}' needs at least one key"
        for j, key in enumerate(self.keys):
            yield from self.key_problems(key, ("keys", j))

    def key_problems(self, key: ProviderKey, here: Path) -> Iterator[Problem]:
        """One key's credential rules: by default an api key, required unless keyless."""
        if self.keyless:
            return
        if key.key is None:
            yield (*here, "key"), f"required for kind '{self.kind}'"
        elif not key.key:
            yield (*here, "key"), "must not be empty"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProviderBase | None:
        """The provider the built-in default config adds for this kind, if any: one named
        after the kind when `env_key` is set in the environment, or always when the kind
        has a `default_model` and needs no key."""
        if cls.env_key is not None:
            value = env.get(cls.env_key)
            return cls(name=cls.kind, keys=[ProviderKey(key=Secret(value))]) if value else None
        if cls.default_model is not None and cls.keyless:
            return cls(name=cls.kind)
        return None


def effective_base_url(p: ProviderBase) -> str:
    """The provider's `base_url` without a trailing slash, else its kind's SDK default.
    Raises ValueError for a kind whose default needs a field the provider lacks (a
    validated config has them)."""
    if p.base_url:
        return p.base_url.rstrip("/")
    return p.default_base_url()
