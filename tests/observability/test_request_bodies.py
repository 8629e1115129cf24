"""body_for_log: no secret survives in any mode, however the raw JSON escapes it."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gateway.observability.request_bodies import MAX_BODY_CHARS
from gateway.observability.request_bodies import body_for_log

SECRET = "sk-test-SECRET-1234"


def test_modes() -> None:
    raw = json.dumps({"model": "gpt", "messages": [{"role": "user", "content": "hello " + SECRET}]})
    assert body_for_log(raw, "off", [SECRET]) is None
    full = body_for_log(raw, "full", [SECRET])
    assert full is not None
    assert SECRET not in full
    assert "hello ***" in full
    redacted = json.loads(body_for_log(raw, "redacted", [SECRET]) or "")
    assert redacted == {
        "model": "gpt",
        "messages": [{"role": "user", "content": "[redacted 25 chars]"}],
    }
    assert (
        body_for_log(b"not json " + SECRET.encode(), "redacted", [SECRET]) == "[not JSON, 28 bytes]"
    )
    assert body_for_log("x " + SECRET, "full", [SECRET]) == "x ***"


def test_escaped_secret_is_caught() -> None:
    escaped = "".join(f"\\u{ord(c):04x}" for c in SECRET)
    raw = '{"model": "' + escaped + '", "content": "' + escaped + '"}'
    for mode in ("full", "redacted"):
        out = body_for_log(raw, mode, [SECRET]) or ""
        assert SECRET not in out
        assert SECRET not in json.loads(out).values()


def test_cap() -> None:
    out = body_for_log(json.dumps({"content": "a" * (2 * MAX_BODY_CHARS)}), "full", [])
    assert out is not None
    assert len(out) < MAX_BODY_CHARS + 100


@given(
    st.recursive(
        st.text() | st.integers() | st.none(),
        lambda kids: (
            st.lists(kids) | st.dictionaries(st.sampled_from(["model", "content", "x"]), kids)
        ),
        max_leaves=20,
    ),
    st.sampled_from(["full", "redacted"]),
    st.booleans(),
)
def test_no_secret_survives(value: object, mode: str, escape: bool) -> None:
    doc = {"model": SECRET, "content": ["a" + SECRET + "b", value]}
    raw = json.dumps(doc, ensure_ascii=escape)
    if escape:
        raw = raw.replace("SECRET", "\\u0053ECRET")
    out = body_for_log(raw, mode, [SECRET]) or ""
    assert SECRET not in out
    assert SECRET not in json.dumps(json.loads(out), ensure_ascii=False)
