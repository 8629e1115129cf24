"""How Bedrock model ids name the models of the price table: a cross-region inference
prefix (`us.`, `eu.`, `apac.`, `global.`...), a vendor prefix (`anthropic.`, `amazon.`...)
and a version suffix (`-v1:0`) around the vendor's own id. Sans-IO."""

from __future__ import annotations

import re

_REGION = re.compile(r"^(us|eu|apac|global|us-gov|jp|au)\.")
_VENDOR = re.compile(r"^(anthropic|amazon|meta|cohere|mistral|ai21)\.")
_VERSION = re.compile(r"-v\d+(:\d+)?$")


def price_id(model: str) -> str:
    """`us.anthropic.claude-sonnet-4-5-20250929-v1:0` -> `claude-sonnet-4-5-20250929`."""
    name = _REGION.sub("", model, count=1)
    name = _VENDOR.sub("", name, count=1)
    return _VERSION.sub("", name, count=1)
