"""The two redactions the secrets scan (test_secrets.py) needed: an upstream's error message
that quotes the credentials of the attempt, and an exception nothing caught."""

from __future__ import annotations

import logging
import sys

import pytest

from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.config import parse_config
from gateway.errors import UpstreamStatusError
from gateway.observability.logs import configure_logging
from gateway.providers.base import BearerToken
from gateway.providers.base import hide_credentials
from gateway.providers.bedrock.config import BedrockKey


def test_an_upstream_message_loses_every_credential_of_the_attempt() -> None:
    key = BedrockKey(
        aws_access_key_id=Secret("AKIAHIDE1"),
        aws_secret_access_key=Secret("aws-secret-hide"),
        aws_session_token=Secret("aws-session-hide"),
    )
    err = UpstreamStatusError(
        "bad: AKIAHIDE1 aws-secret-hide aws-session-hide ya29.token",
        retryable=False,
        upstream_status=400,
    )
    assert hide_credentials(err, key, BearerToken(token="ya29.token", expires_at=0.0)) is err
    assert err.message == "bad: [redacted] [redacted] [redacted] [redacted]"
    assert str(err) == err.message
    plain = UpstreamStatusError("Incorrect API key provided: sk-x-1", upstream_status=500)
    hide_credentials(plain, ProviderKey(key=Secret("sk-x-1")))
    assert plain.message == "Incorrect API key provided: [redacted]"
    untouched = UpstreamStatusError("nothing to hide", upstream_status=500)
    assert hide_credentials(untouched, None).message == "nothing to hide"


def test_an_uncaught_exception_is_logged_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    config = parse_config("auth: {master_key: sk-uncaught-master}\n", {})
    root = logging.getLogger()
    handlers, level, hook = list(root.handlers), root.level, sys.excepthook
    try:
        configure_logging(config)
        try:
            raise RuntimeError("failed with sk-uncaught-master")
        except RuntimeError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        sys.excepthook = hook
    written = capsys.readouterr().err
    assert "uncaught exception" in written
    assert "RuntimeError: failed with [redacted]" in written
    assert "sk-uncaught-master" not in written
