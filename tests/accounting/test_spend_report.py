"""/admin/spend's report: totals per key and per model, and each key's own spend by model
(two keys on the same model stay apart under `keys[].models`, meet under `models`)."""

from __future__ import annotations

from gateway.server.admin_keys import spend_report
from gateway.store.ledger import SpendRow


def test_each_key_has_its_own_spend_by_model() -> None:
    rows = [
        SpendRow(key_id="k1", model="up/a", cost_nanos=100, requests=1),
        SpendRow(key_id="k1", model="up/b", cost_nanos=20, requests=2),
        SpendRow(key_id="k2", model="up/a", cost_nanos=5, requests=1),
        SpendRow(key_id="", model="up/b", cost_nanos=1, requests=1),
    ]
    report = spend_report(rows, {"k1": "team", "k2": "ci"})
    assert report["total_nanos"] == 126
    keys = {k["key_id"]: k for k in report["keys"]}
    assert [(m["model"], m["spend_nanos"]) for m in keys["k1"]["models"]] == [
        ("up/a", 100),
        ("up/b", 20),
    ]
    assert keys["k1"]["spend_nanos"] == 120
    assert keys["k1"]["name"] == "team"
    assert [(m["model"], m["requests"]) for m in keys["k2"]["models"]] == [("up/a", 1)]
    assert [m["model"] for m in keys[None]["models"]] == ["up/b"]  # the master key
    models = {m["model"]: m["spend_nanos"] for m in report["models"]}
    assert models == {"up/a": 105, "up/b": 21}
