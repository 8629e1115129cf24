"""GET /admin/config: the config this process serves, with every secret as `***`.

Master key only, like the rest of the admin API. The answer:

    {"pid", "path", "sha256", "loaded_at", "config": {...}, "last_reload": {...} | null}

`sha256` is of the file's bytes as read (null for the built-in default), `loaded_at` and
`last_reload.at` are RFC 3339 UTC. `config` is the parsed config in force (`${VAR}`s
interpolated, the command line's `--host/--port/--workers` applied), where:

- every field the config declares a secret (`Secret`: provider keys and their other
  credential forms, the master key, static virtual keys) is `***` (`""` when unset, so an
  open gateway shows as one);
- the userinfo of any URL (`store.url`'s password, a provider's `proxy` credentials) is `***`;
- as a second guard, any other string holding a configured secret (one collected as the
  log formatter's redaction does, observability/logs.py) has it replaced by `***`.

Each worker answers for itself (`pid`); after a reload they all serve the same file.
"""

from __future__ import annotations

import os
import re
from datetime import UTC
from datetime import datetime
from typing import Any

import msgspec
from aiohttp import web

from gateway.config import Config
from gateway.config import Secret
from gateway.observability.logs import configured_secrets
from gateway.server.auth import authorize_admin
from gateway.server.state import STATE

MASK = "***"
# a secret this short is masked where it is a whole value, not searched for inside others
# (a one-letter test key would mangle every word with that letter in it)
MIN_EMBEDDED_SECRET = 6
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#]*)@")
_URL_FIELDS = frozenset({"proxy", "url"})


async def admin_config(request: web.Request) -> web.Response:
    await authorize_admin(request)
    state = request.app[STATE]
    source, last = state.served.source, state.last_reload
    body: dict[str, Any] = {
        "pid": os.getpid(),
        "path": source.path,
        "sha256": source.sha256,
        "loaded_at": rfc3339(source.loaded_at),
        "config": redacted(state.config),
        "last_reload": None,
    }
    if last is not None:
        body["last_reload"] = {
            "at": rfc3339(last.at),
            "result": last.result,
            "trigger": last.trigger,
            "sha256": last.sha256,
            "problems": list(last.problems),
        }
    return web.json_response(body)


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def redacted(config: Config) -> Any:
    """`config` as JSON-ready builtins with every secret masked (see the module docstring)."""
    found: set[str] = set(configured_secrets(config))

    def hide(value: Any) -> Any:
        if isinstance(value, Secret):
            if not value:
                return ""
            found.add(value.reveal())
            return MASK
        raise NotImplementedError(f"no JSON form for {type(value).__name__}")

    tree = msgspec.to_builtins(config, enc_hook=hide)
    secrets = sorted(found, key=len, reverse=True)  # a secret inside another: the longer first
    return _masked(tree, None, secrets)


def _masked(node: Any, field: str | None, secrets: list[str]) -> Any:
    if isinstance(node, dict):
        return {
            _masked_text(str(k), None, secrets): _masked(v, str(k), secrets)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_masked(item, field, secrets) for item in node]
    if isinstance(node, str):
        return _masked_text(node, field, secrets)
    return node


def _masked_text(text: str, field: str | None, secrets: list[str]) -> str:
    if text == MASK or not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    if field in _URL_FIELDS and "@" in text and "://" not in text:
        text = MASK + "@" + text.rpartition("@")[2]  # a proxy written without a scheme
    for secret in secrets:
        if text == secret:
            return MASK
        if len(secret) >= MIN_EMBEDDED_SECRET and secret in text:
            text = text.replace(secret, MASK)
    return text
