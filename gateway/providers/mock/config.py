"""The `mock` provider's config: the shape of its canned stream; no keys."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import ClassVar

import msgspec

from gateway.config_base import ProviderBase
from gateway.config_parse import Problem


class MockOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The shape of the mock provider's stream."""

    chunks: int = 12
    delay_s: float = 0.0  # between chunks


class MockProvider(ProviderBase, tag="mock", forbid_unknown_fields=True, kw_only=True, frozen=True):
    kind: ClassVar[str] = "mock"
    default_url: ClassVar[str | None] = "mock://"
    keyless: ClassVar[bool] = True
    default_model: ClassVar[str | None] = "mock"

    mock: MockOptions | None = None

    def problems(self) -> Iterator[Problem]:
        if self.mock is not None:
            if self.mock.chunks < 1:
                yield ("mock", "chunks"), "must be >= 1"
            delay = self.mock.delay_s
            if not (math.isfinite(delay) and delay >= 0):
                yield ("mock", "delay_s"), "must be >= 0"
        yield from super().problems()
