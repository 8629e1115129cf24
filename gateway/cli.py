"""The command line: `gateway serve`, `gateway check-config` and `gateway keys ...`."""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
from collections.abc import Sequence

import msgspec

from gateway.accounting.keys_cli import add_keys_parser
from gateway.accounting.keys_cli import run_keys
from gateway.config import Config
from gateway.config import ConfigError
from gateway.config import check_config
from gateway.config import default_config
from gateway.config import load_config
from gateway.providers.registry import supported_kinds
from gateway.store.kv import store_problem

log = logging.getLogger("gateway")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway", description="An OpenAI-compatible LLM gateway."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", help="serve the gateway (the built-in default without --config)"
    )
    serve.add_argument("--config", help="YAML config file")
    serve.add_argument("--host", help="listen address (overrides server.host)")
    serve.add_argument("--port", type=int, help="listen port (overrides server.port)")
    serve.add_argument("--workers", type=int, help="worker processes (overrides server.workers)")
    check = sub.add_parser("check-config", help="validate a config file and print every problem")
    check.add_argument("path")
    add_keys_parser(sub)
    return parser


def _load(path: str | None) -> Config:
    if path is None:
        config = default_config(os.environ)
        kinds = supported_kinds()
        skipped = [p.name for p in config.providers if p.kind not in kinds]
        if skipped:
            log.warning("not serving %s: their kinds are not in this build yet", ", ".join(skipped))
            config = _without_providers(config, set(skipped))
        return config
    config = load_config(path)
    unsupported = _unsupported(config)
    if unsupported:
        raise ConfigError(unsupported)
    return config


def _unsupported(config: Config) -> list[str]:
    """Problems for what the config schema allows but this build does not do yet: a
    setting that silently did nothing would be worse than a refusal."""
    problems = [
        f"providers[{i}].kind: kind {p.kind!r} is not available in this build yet"
        for i, p in enumerate(config.providers)
        if p.kind not in supported_kinds()
    ]
    return problems


def _without_providers(config: Config, names: set[str]) -> Config:
    return msgspec.structs.replace(
        config, providers=[p for p in config.providers if p.name not in names]
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check-config":
        report = io.StringIO()
        status = check_config(args.path, report)
        problems = _unsupported(load_config(args.path)) if status == 0 else []
        if problems:
            print("\n".join(problems))
            print(f"{len(problems)} problem{'s' if len(problems) > 1 else ''} in {args.path}")
            return 1
        sys.stdout.write(report.getvalue())
        return status
    if args.command == "keys":
        try:
            config = _load(args.config)
        except ConfigError as exc:
            print("\n".join(exc.problems), file=sys.stderr)
            return 2
        return run_keys(args, config, sys.stdout, sys.stderr)
    from gateway.server.reload import ConfigFile
    from gateway.server.runner import LOG_FORMAT
    from gateway.server.runner import serve

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        config = _load(args.config)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 2
    unusable_store = store_problem(config.store.url)
    if unusable_store:  # before any worker starts: each would fail, be restarted, fail again
        print(f"store.url: {unusable_store}", file=sys.stderr)
        return 2
    server = config.server
    return serve(
        config,
        host=args.host or server.host,
        port=server.port if args.port is None else args.port,
        workers=args.workers or server.workers,
        # what a reload reads (SIGHUP, a changed file), with the same flags applied to it
        config_file=None
        if args.config is None
        else ConfigFile(args.config, host=args.host, port=args.port, workers=args.workers),
    )


if __name__ == "__main__":
    sys.exit(main())
