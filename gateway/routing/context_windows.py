"""The shipped context-window table (context_windows.json): how many tokens an upstream
model takes, for context-window fallbacks (docs/routing.md). Looked up like prices: lower
case, without a provider prefix, as the provider kind names it, then without a date suffix,
then by the longest known prefix; None when the model is not in it."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from gateway.accounting.prices import DATED_SUFFIX
from gateway.accounting.prices import normalize


@cache
def shipped() -> dict[str, int]:
    text = resources.files("gateway.routing").joinpath("context_windows.json").read_text("utf-8")
    return {row["model"]: int(row["tokens"]) for row in json.loads(text)["models"]}


def context_window_of(model: str, kind: str | None = None) -> int | None:
    entries = shipped()
    name = normalize(model, kind)
    found = entries.get(name)
    if found is None:
        name = DATED_SUFFIX.sub("", name)
        found = entries.get(name)
    if found is None:
        for known in sorted(entries, key=len, reverse=True):
            if name.startswith(known + "-"):
                return entries[known]
    return found
