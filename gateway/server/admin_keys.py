"""The admin API for virtual keys and spend (master key only; see server/auth.py).

    POST   /admin/keys        create; 201 with the secret (`key`), shown this once
    GET    /admin/keys        every key (static keys from the config included), with spend
    GET    /admin/keys/{id}   one key with its spend, its budget window's spend and what
                              requests in flight hold
    DELETE /admin/keys/{id}   revoke (keys from the config cannot be: edit the config)
    GET    /admin/spend       spend per key and per model

Amounts are USD as JSON numbers (`*_usd`) and, exact, as integer nanodollars (`*_nanos`).
Nothing here ever returns a secret or its hash, except the secret in the creation answer.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from aiohttp import web

from gateway.accounting.keys import NewKey
from gateway.accounting.keys import budget_windows
from gateway.accounting.keys import key_view
from gateway.accounting.keys import make_key
from gateway.accounting.prices import usd
from gateway.accounting.service import ACCOUNTING
from gateway.accounting.service import Accounting
from gateway.errors import ClientError
from gateway.errors import NotFound
from gateway.server.auth import authorize_admin
from gateway.server.request_body import read_json_object
from gateway.server.request_body import typed
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import SpendRow


class StaticKeyConflict(ClientError):
    status = 409
    code = "static_key"


def _money(nanos: int, name: str = "spend") -> dict[str, Any]:
    return {f"{name}_usd": float(usd(nanos)), f"{name}_nanos": nanos}


def _static(accounting: Accounting) -> list[KeyRecord]:
    return list(accounting.static_keys.values())


async def _find(accounting: Accounting, key_id: str) -> KeyRecord:
    for record in _static(accounting):
        if record.id == key_id:
            return record
    stored = await accounting.ledger.get_key(key_id)
    if stored is None:
        raise NotFound(f"No key with id '{key_id}'", param="id", code="key_not_found")
    return stored


async def create_key(request: web.Request) -> web.Response:
    await authorize_admin(request)
    accounting = request.app[ACCOUNTING]
    spec = typed(await read_json_object(request), NewKey)
    record, secret = make_key(spec)
    await accounting.ledger.create_key(record)
    body = {**key_view(record, time.time()), "key": secret}
    return web.json_response(body, status=201)


async def list_keys(request: web.Request) -> web.Response:
    await authorize_admin(request)
    accounting = request.app[ACCOUNTING]
    records = [*_static(accounting), *await accounting.ledger.list_keys()]
    spent: dict[str, int] = defaultdict(int)
    for row in await accounting.ledger.spend():
        spent[row.key_id] += row.cost_nanos
    now = time.time()
    data = [{**key_view(r, now), **_money(spent[r.id])} for r in records]
    return web.json_response({"object": "list", "data": data})


async def get_key(request: web.Request) -> web.Response:
    await authorize_admin(request)
    accounting = request.app[ACCOUNTING]
    record = await _find(accounting, request.match_info["key_id"])
    now = time.time()
    window = budget_windows(now).get(record.budget_period, "total")
    spend = await accounting.ledger.key_spend(record.id, window, now)
    body = {
        **key_view(record, now),
        **_money(spend.total_nanos),
        "budget_window": window,
        **_money(spend.window_nanos, "window_spend"),
        **_money(spend.reserved_nanos, "reserved"),
    }
    if record.budget_nanos is not None:
        left = record.budget_nanos - spend.window_nanos - spend.reserved_nanos
        body |= _money(max(left, 0), "budget_left")
    return web.json_response(body)


async def revoke_key(request: web.Request) -> web.Response:
    await authorize_admin(request)
    accounting = request.app[ACCOUNTING]
    key_id = request.match_info["key_id"]
    if any(r.id == key_id for r in _static(accounting)):
        raise StaticKeyConflict(
            f"Key '{key_id}' comes from the config file: remove it there", param="id"
        )
    if not await accounting.ledger.revoke_key(key_id):
        raise NotFound(f"No key with id '{key_id}'", param="id", code="key_not_found")
    return web.json_response({"id": key_id, "revoked": True})


async def spend(request: web.Request) -> web.Response:
    await authorize_admin(request)
    accounting = request.app[ACCOUNTING]
    await accounting.hits.flush()  # this process's hits (another worker's: within a second)
    rows = await accounting.ledger.spend()
    names = {r.id: r.name for r in [*_static(accounting), *await accounting.ledger.list_keys()]}
    return web.json_response(spend_report(rows, names))


def spend_report(rows: list[SpendRow], names: dict[str, str]) -> dict[str, Any]:
    """Totals per key (`key_id` null: the master key or an open gateway), each with its
    spend by model, and per model."""
    keys: dict[str, SpendRow] = {}
    models: dict[str, SpendRow] = {}
    by_key: dict[str, list[SpendRow]] = {}  # each key's own rows: its spend by model
    for row in rows:
        by_key.setdefault(row.key_id, []).append(row)
        for group, name in ((keys, row.key_id), (models, row.model)):
            total = group.setdefault(name, SpendRow(key_id=row.key_id, model=row.model))
            total.cost_nanos += row.cost_nanos
            total.requests += row.requests
            total.input_tokens += row.input_tokens
            total.output_tokens += row.output_tokens
            total.estimated += row.estimated
            total.cache_hits += row.cache_hits
            total.cache_saved_nanos += row.cache_saved_nanos

    def counts(row: SpendRow) -> dict[str, Any]:
        return {
            **_money(row.cost_nanos),
            "requests": row.requests,
            "input_tokens": row.input_tokens,
            "output_tokens": row.output_tokens,
            "estimated_requests": row.estimated,
            "cache_hits": row.cache_hits,
            **_money(row.cache_saved_nanos, "cache_saved"),
        }

    return {
        **_money(sum(r.cost_nanos for r in rows), "total"),
        "keys": [
            {
                "key_id": k or None,
                "name": names.get(k),
                **counts(r),
                "models": [
                    {"model": m.model, **counts(m)}
                    for m in sorted(by_key[k], key=lambda m: m.model)
                ],
            }
            for k, r in sorted(keys.items())
        ],
        "models": [{"model": m, **counts(r)} for m, r in sorted(models.items())],
    }


def add_admin_routes(app: web.Application) -> None:
    app.router.add_post("/admin/keys", create_key)
    app.router.add_get("/admin/keys", list_keys)
    app.router.add_get("/admin/keys/{key_id}", get_key)
    app.router.add_delete("/admin/keys/{key_id}", revoke_key)
    app.router.add_get("/admin/spend", spend)
