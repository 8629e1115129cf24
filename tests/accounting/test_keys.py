"""Virtual keys: secrets and their hashes, static keys from the config, budget windows."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import pytest

from gateway.accounting.keys import NewKey
from gateway.accounting.keys import budget_windows
from gateway.accounting.keys import hash_secret
from gateway.accounting.keys import key_view
from gateway.accounting.keys import make_key
from gateway.accounting.keys import static_keys
from gateway.config import parse_config
from gateway.errors import BadRequest


def test_a_new_key_keeps_only_the_hash_of_its_secret() -> None:
    record, secret = make_key(NewKey(name="ci", budget_usd=1.25, budget_period="none"), now=1.0)
    assert secret.startswith("sk-gw-")
    assert len(secret) > 40
    assert record.secret_hash == hash_secret(secret) != secret
    assert secret not in repr(record)
    assert (record.budget_nanos, record.budget_period) == (1_250_000_000, "total")
    view = key_view(record, now=2.0)
    assert secret not in str(view)
    assert record.secret_hash not in str(view)
    other, other_secret = make_key(NewKey(name="ci"))
    assert (other.id, other_secret) != (record.id, secret)


def test_expiry_is_read_as_utc_without_an_offset() -> None:
    record, _ = make_key(NewKey(name="x", expires_at="2030-01-02T03:04:05"))
    assert record.expires_at == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    with_offset, _ = make_key(NewKey(name="x", expires_at="2030-01-02T05:04:05+02:00"))
    assert with_offset.expires_at == record.expires_at
    with pytest.raises(BadRequest) as bad:
        make_key(NewKey(name="x", expires_at="tomorrow"))
    assert bad.value.param == "expires_at"


def test_static_keys_are_found_by_hash_with_stable_ids() -> None:
    config = parse_config(
        """
providers: [{name: mock, kind: mock}]
models: [{name: m, targets: [{provider: mock, model: mock}]}]
keys:
  - {name: ci, key: "${K}", budget_usd: 0.5, budget_period: none, rpm: 3, models: [m]}
  - {name: nightly, key: other-secret, budget_period: daily}
""",
        env={"K": "sk-human-chosen"},
    )
    keys = static_keys(config.keys)
    ci = keys[hash_secret("sk-human-chosen")]
    assert (ci.id, ci.static, ci.budget_period, ci.budget_nanos) == (
        "cfg-ci",
        True,
        "total",
        500_000_000,
    )
    assert (ci.rpm, ci.models) == (3, ["m"])
    assert keys[hash_secret("other-secret")].budget_period == "daily"


def test_budget_windows_are_utc_calendar_periods() -> None:
    late = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    assert budget_windows(late) == {
        "total": "total",
        "daily": "d2026-12-31",
        "weekly": "w2026-W53",
        "monthly": "m2026-12",
    }
    assert budget_windows(late + 1)["daily"] == "d2027-01-01"
    assert budget_windows(late + 1)["weekly"] == "w2026-W53"  # ISO weeks cross the year
