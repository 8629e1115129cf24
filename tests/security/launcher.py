"""Runs `gateway` with one failure injected, for the secrets scan (tests/security/test_secrets.py).

`GW_CRASH_TEXT` is the text the injected exceptions carry (the test puts secrets in it, as
a library that quotes a credential in its exception message would):

- `GW_CRASH=request`: a request whose bearer token is `crash-request` raises an unhandled
  exception inside the handler (the error middleware logs it with its traceback);
- `GW_CRASH=start`: the worker raises at startup, so the exception escapes the process's
  main (Python's top-level handler prints it) and the process exits.
"""

from __future__ import annotations

import os
import sys

from gateway import cli
from gateway.accounting.service import Accounting
from gateway.accounting.service import Principal
from gateway.server import runner

TEXT = os.environ.get("GW_CRASH_TEXT", "")
MODE = os.environ.get("GW_CRASH", "")

if MODE == "request":
    real_principal = Accounting.principal

    def principal(self: Accounting, token: str | None) -> Principal:
        if token == "crash-request":
            raise RuntimeError(f"injected failure quoting {TEXT}")
        return real_principal(self, token)

    Accounting.principal = principal  # type: ignore[method-assign]

if MODE == "start":

    def run_worker(*args: object, **kwargs: object) -> int:
        raise RuntimeError(f"injected startup failure quoting {TEXT}")

    runner.run_worker = run_worker  # type: ignore[assignment]

sys.exit(cli.main())
