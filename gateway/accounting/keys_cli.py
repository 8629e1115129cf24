"""`gateway keys create|list|revoke`: virtual keys in the store the config names, without a
running gateway (the same store the gateway reads, so a key made here works at once).

Output is JSON on stdout; `create` prints the secret (`key`) this once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any
from typing import TextIO

import msgspec

from gateway.accounting.keys import NewKey
from gateway.accounting.keys import key_view
from gateway.accounting.keys import make_key
from gateway.accounting.keys import static_keys
from gateway.config import Config
from gateway.errors import GatewayError
from gateway.store.kv import StoreError
from gateway.store.ledger import make_ledger


def add_keys_parser(sub: Any) -> None:
    keys = sub.add_parser("keys", help="virtual keys in the configured store")
    keys.add_argument("--config", help="YAML config file (its store.url is used)")
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="make a key and print its secret once")
    create.add_argument("--name", required=True)
    create.add_argument("--budget-usd", type=float)
    create.add_argument(
        "--budget-period", choices=["none", "total", "daily", "weekly", "monthly"], default="total"
    )
    create.add_argument("--rpm", type=int)
    create.add_argument("--tpm", type=int)
    create.add_argument("--model", action="append", dest="models", help="allowed (repeatable)")
    create.add_argument("--expires-at", help="ISO 8601 date-time (UTC without an offset)")
    create.add_argument("--metadata", help="a JSON object")
    actions.add_parser("list", help="every key (static ones from the config too)")
    revoke = actions.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")


def run_keys(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    try:
        return asyncio.run(_run(args, config, out))
    except (GatewayError, StoreError, msgspec.ValidationError, ValueError) as exc:
        print(f"gateway keys {args.action}: {getattr(exc, 'message', exc)}", file=err)
        return 1


async def _run(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    ledger = make_ledger(config.store.url)
    try:
        now = time.time()
        if args.action == "create":
            spec = msgspec.convert(
                {
                    "name": args.name,
                    "budget_usd": args.budget_usd,
                    "budget_period": args.budget_period,
                    "rpm": args.rpm,
                    "tpm": args.tpm,
                    "models": args.models,
                    "expires_at": args.expires_at,
                    "metadata": json.loads(args.metadata) if args.metadata else None,
                },
                NewKey,
            )
            record, secret = make_key(spec, now)
            await ledger.create_key(record)
            _print(out, {**key_view(record, now), "key": secret})
        elif args.action == "list":
            records = [*static_keys(config.keys).values(), *await ledger.list_keys()]
            _print(out, {"object": "list", "data": [key_view(r, now) for r in records]})
        else:
            if any(r.id == args.key_id for r in static_keys(config.keys).values()):
                raise ValueError(f"{args.key_id} comes from the config file: remove it there")
            if not await ledger.revoke_key(args.key_id):
                raise ValueError(f"no key with id {args.key_id}")
            _print(out, {"id": args.key_id, "revoked": True})
        return 0
    finally:
        await ledger.close()


def _print(out: TextIO, value: dict[str, Any]) -> None:
    out.write(json.dumps(value, indent=2) + "\n")
