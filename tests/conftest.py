"""Test-wide hygiene: every openai-python client a test makes with its own connection
pool is closed when the test ends (langchain's clients share one cached pool, kept open),
so no client socket is left for the garbage collector to find, and warn about, in some
later, unrelated test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest


@pytest.fixture(autouse=True)
def _close_openai_clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    made: list[openai.OpenAI] = []
    original = openai.OpenAI.__init__

    def tracking_init(self: openai.OpenAI, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if kwargs.get("http_client") is None:  # langchain shares a cached one: not ours
            made.append(self)

    monkeypatch.setattr(openai.OpenAI, "__init__", tracking_init)
    yield
    for client in made:
        client.close()
