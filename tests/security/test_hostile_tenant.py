"""A hostile tenant against real gateway processes, on every store: `memory://` (one process),
sqlite with `--workers 2` (two workers on one port, one file) and a real redis-server behind
two gateway processes on different ports (requests alternated between them).

Each test is one exploit of a tenant holding a virtual key (made fresh for the test through
`POST /admin/keys`), and checks what the key's limits must still hold:

- client-chosen `x-request-id`s never merge requests in the rate window or the budget;
- a key with a budget or tpm cannot run a model without a price (`provider/<unknown id>`),
  and a configured (provider, model) pair addressed directly pays its configured price;
- `n` choices and a `previous_response_id` history are reserved for what they cost;
- a stored response is its creator's alone;
- `count_tokens` and embeddings are admitted (rpm) and hold a concurrency slot;
- no `gs://` URL reaches a provider that reads it with the operator's identity, and no model
  name with a path dot segment is served;
- a client trickling its request head is cut off at `server.client_header_timeout_s`.

The upstream (`hostile.BillingOpenAI`) bills what it is sent (prompt tokens = body bytes / 4),
so the settled spend is what a real upstream would charge. The figures (requests sent,
served, settled spend against budget) are printed (`pytest -s`) and kept in
docs/reliability.md ("Hostile tenants").
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.security.hostile import BILLED_COMPLETION
from tests.security.hostile import DEFAULT_OUTPUT_CAP
from tests.security.hostile import HEADER_TIMEOUT_S
from tests.security.hostile import MASTER
from tests.security.hostile import STORES
from tests.security.hostile import Figure
from tests.security.hostile import Store
from tests.security.hostile import Upstreams
from tests.security.hostile import concurrently
from tests.security.hostile import config
from tests.security.hostile import cost_nanos
from tests.security.hostile import report
from tests.security.hostile import reserve_nanos
from tests.security.hostile import store_gateways
from tests.security.hostile import table
from tests.security.hostile import trickle
from tests.security.hostile import usd

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def upstreams() -> Iterator[Upstreams]:
    with Upstreams.running() as up:
        yield up
    print("\n" + table())


@pytest.fixture(scope="module", params=STORES)
def store(
    request: pytest.FixtureRequest, upstreams: Upstreams, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    """The gateways of one store, started once for the module."""
    name: str = request.param
    with store_gateways(name, tmp_path_factory.mktemp(f"hostile-{name}"), upstreams) as s:
        yield s


def body_of(model: str = "priced", **extra: Any) -> bytes:
    return json.dumps({"model": model, "messages": HI, **extra}).encode()


def error_of(r: httpx.Response) -> dict[str, Any]:
    """The OpenAI error object of an answer, its shape checked."""
    answer = r.json()
    assert set(answer) == {"error"}, answer
    error: dict[str, Any] = answer["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


def assert_rate_limited(r: httpx.Response) -> None:
    assert r.status_code == 429, r.text
    assert error_of(r)["code"] == "rate_limit_exceeded"
    assert int(r.headers["Retry-After"]) >= 0


def upstream_calls(s: Store, model: str) -> int:
    return sum(1 for seen in s.up.openai.requests if seen.body.get("model") == model)


# --- 1. client-chosen request ids --------------------------------------------------------------


def test_one_request_id_on_sequential_requests_gets_no_extra_rpm(store: Store) -> None:
    key = store.new_key(rpm=2)
    answers = [store.post(CHAT, body_of(), key["key"], {"x-request-id": "same"}) for _ in range(6)]
    statuses = [r.status_code for r in answers]
    report(Figure(store.name, "rpm 2, one x-request-id, sequential", 6, statuses.count(200)))
    assert statuses == [200, 200, 429, 429, 429, 429]
    for r in answers:
        assert r.headers["x-request-id"] == "same"  # still echoed
    for r in answers[2:]:
        assert_rate_limited(r)


def test_one_request_id_on_concurrent_requests_gets_no_extra_rpm(store: Store) -> None:
    key = store.new_key(rpm=2)
    body = body_of("held", stream=True)
    answers = concurrently(
        6, lambda _: store.post(CHAT, body, key["key"], {"x-request-id": "same"})
    )
    statuses = sorted(r.status_code for r in answers)
    served = statuses.count(200)
    report(Figure(store.name, "rpm 2, one x-request-id, 6 concurrent", 6, served))
    assert served <= 2, statuses
    assert set(statuses) <= {200, 429}
    for r in answers:
        assert r.headers["x-request-id"] == "same"
        if r.status_code == 429:
            assert_rate_limited(r)


def test_one_request_id_on_concurrent_requests_holds_the_budget(store: Store) -> None:
    """Ten requests in flight together (the upstream holds each for a second), all with one
    x-request-id, against a budget of three and a half reservations."""
    body = body_of(
        "held",
        max_tokens=BILLED_COMPLETION,
        stream=True,
        stream_options={"include_usage": True},
    )
    one = reserve_nanos(body, BILLED_COMPLETION)
    budget = 3 * one + one // 2
    key = store.new_key(budget_usd=usd(budget))
    sent = 10
    answers = concurrently(
        sent, lambda _: store.post(CHAT, body, key["key"], {"x-request-id": "same"})
    )
    view = store.key_view(key["id"])
    statuses = sorted(r.status_code for r in answers)
    served = statuses.count(200)
    spend = view["spend_nanos"]
    report(
        Figure(
            store.name,
            "budget 3.5 reservations, one x-request-id, 10 concurrent",
            sent,
            served,
            budget,
            spend,
            one,
        )
    )
    assert set(statuses) <= {200, 429}, statuses
    for r in answers:
        assert r.headers["x-request-id"] == "same"
        if r.status_code == 429:
            assert error_of(r)["code"] == "budget_exceeded"
    assert 1 <= served <= budget // one + 1, statuses
    assert spend <= budget + one
    assert view["reserved_nanos"] == 0


# --- 2. unpriced models under a budget ---------------------------------------------------------


@pytest.mark.parametrize("limits", [{"budget_usd": 1.0}, {"tpm": 100000}], ids=["budget", "tpm"])
def test_a_metered_key_cannot_run_an_unpriced_model(store: Store, limits: dict[str, Any]) -> None:
    key = store.new_key(**limits)
    before = upstream_calls(store, "some-finetune-unknown")
    r = store.post(CHAT, body_of("up/some-finetune-unknown"), key["key"])
    view = store.key_view(key["id"])
    report(
        Figure(
            store.name,
            f"unpriced model, key with {next(iter(limits))}",
            1,
            int(r.status_code == 200),
            None,
            view["spend_nanos"],
        )
    )
    assert r.status_code == 403, r.text
    error = error_of(r)
    assert error["code"] == "model_not_priced"
    assert error["param"] == "model"
    assert upstream_calls(store, "some-finetune-unknown") == before  # nothing went upstream
    assert view["spend_nanos"] == 0
    assert view["reserved_nanos"] == 0


def test_a_key_without_budget_or_tpm_may_run_an_unpriced_model(store: Store) -> None:
    key = store.new_key(rpm=100)
    before = upstream_calls(store, "some-finetune-unknown")
    r = store.post(CHAT, body_of("up/some-finetune-unknown"), key["key"])
    assert r.status_code == 200, r.text
    assert upstream_calls(store, "some-finetune-unknown") == before + 1


def test_a_configured_pair_addressed_directly_pays_its_configured_price(store: Store) -> None:
    """`up/text` is the target of the priced model `priced`: sent as `up/text`, it costs the
    configured price of its usage (the shipped table knows no `text`: 0 before)."""
    key = store.new_key(budget_usd=1.0)
    r = store.post(CHAT, body_of("up/text"), key["key"])
    assert r.status_code == 200, r.text
    expected = cost_nanos(r.json()["usage"])
    view = store.key_view(key["id"])
    report(
        Figure(store.name, "configured pair addressed directly", 1, 1, None, view["spend_nanos"])
    )
    assert expected > 0
    assert view["spend_nanos"] == expected
    assert r.headers["x-gateway-cost-usd"] == f"{usd(expected):.9f}"
    assert view["reserved_nanos"] == 0


# --- 3. n choices ------------------------------------------------------------------------------


def test_n_choices_are_reserved_n_times(store: Store) -> None:
    one_body = body_of()
    eight_body = body_of(n=8)
    one = reserve_nanos(one_body, DEFAULT_OUTPUT_CAP)
    eight = reserve_nanos(eight_body, 8 * DEFAULT_OUTPUT_CAP)
    small = store.new_key(budget_usd=usd(2 * one))  # one n=1 reservation, not 8 output caps
    refused = store.post(CHAT, eight_body, small["key"])
    single = store.post(CHAT, one_body, small["key"])  # the budget does cover one choice
    small_view = store.key_view(small["id"])
    report(
        Figure(
            store.name,
            "n=8 against 2 single reservations",
            1,
            int(refused.status_code == 200),
            2 * one,
            small_view["spend_nanos"],
            eight,
        )
    )
    assert refused.status_code == 429, refused.text
    assert error_of(refused)["code"] == "budget_exceeded"
    assert single.status_code == 200, single.text
    assert small_view["reserved_nanos"] == 0

    big = store.new_key(budget_usd=usd(eight + one))
    served = store.post(CHAT, eight_body, big["key"])
    assert served.status_code == 200, served.text
    big_view = store.key_view(big["id"])
    assert big_view["reserved_nanos"] == 0
    assert big_view["spend_nanos"] == cost_nanos(served.json()["usage"])


# --- 4. previous_response_id history -----------------------------------------------------------


def test_a_continuation_reserves_its_stored_history(store: Store) -> None:
    """A 20 KB first turn, then tiny turns continuing it: each continuation sends the whole
    history upstream (and is billed for it), so it must be reserved for it. The budget covers
    the first turn and two tiny turns' own bodies, not the history."""
    big_text = "lorem ipsum " * (20_000 // 12)

    def turn(text: str, previous: str | None) -> bytes:
        body: dict[str, Any] = {"model": "priced", "input": text, "max_output_tokens": 16}
        if previous is not None:
            body["previous_response_id"] = previous
        return json.dumps(body).encode()

    first = turn(big_text, None)
    tiny = turn("and then?", "resp_" + "0" * 48)  # the size of every later turn
    budget = reserve_nanos(first, 16) + 2 * reserve_nanos(tiny, 16)
    key = store.new_key(budget_usd=usd(budget))
    opened = store.post(RESPONSES, first, key["key"])
    assert opened.status_code == 200, opened.text
    last = opened.json()["id"]
    statuses = [200]
    refusals = []
    for _ in range(3):
        r = store.post(RESPONSES, turn("and then?", last), key["key"])
        statuses.append(r.status_code)
        if r.status_code == 200:
            last = r.json()["id"]
        else:
            refusals.append(r)
    view = store.key_view(key["id"])
    spend = view["spend_nanos"]
    one = reserve_nanos(tiny, 16, history_bytes=len(first))  # the least a continuation holds
    report(
        Figure(
            store.name,
            "20 KB history, then tiny continuations",
            len(statuses),
            statuses.count(200),
            budget,
            spend,
            one,
        )
    )
    assert statuses == [200, 429, 429, 429]
    for r in refusals:
        assert error_of(r)["code"] == "budget_exceeded"
    assert spend <= budget + one
    assert view["reserved_nanos"] == 0


def test_a_continuation_sends_and_pays_its_history(store: Store) -> None:
    """The same chain with a budget that covers it: every turn is served, and the upstream
    is sent (and bills) the whole history each time: why a continuation is reserved for it."""
    big_text = "lorem ipsum " * (20_000 // 12)
    key = store.new_key(budget_usd=1.0)
    body: dict[str, Any] = {"model": "priced", "input": big_text, "max_output_tokens": 16}
    costs = []
    for _ in range(3):
        r = store.post(RESPONSES, body, key["key"])
        assert r.status_code == 200, r.text
        assert len(store.up.openai.raw[-1]) > 20_000  # the history went upstream
        answer = r.json()
        usage = answer["usage"]
        costs.append(
            cost_nanos(
                {
                    "prompt_tokens": usage["input_tokens"],
                    "completion_tokens": usage["output_tokens"],
                }
            )
        )
        body = {
            "model": "priced",
            "input": "and then?",
            "max_output_tokens": 16,
            "previous_response_id": answer["id"],
        }
    view = store.key_view(key["id"])
    assert view["spend_nanos"] == sum(costs)
    assert view["reserved_nanos"] == 0


# --- 5. stored responses belong to their creator -----------------------------------------------


def test_a_stored_response_is_its_creators_alone(store: Store) -> None:
    owner = store.new_key()
    other = store.new_key()
    created = store.post(RESPONSES, {"model": "priced", "input": "my secret plan"}, owner["key"])
    assert created.status_code == 200, created.text
    response_id = created.json()["id"]
    unknown_id = "resp_" + secrets.token_hex(24)

    def continue_(key: str, previous: str) -> httpx.Response:
        return store.post(
            RESPONSES,
            {"model": "priced", "input": "go on", "previous_response_id": previous},
            key,
        )

    unknown = continue_(other["key"], unknown_id)
    foreign = [continue_(caller, response_id) for caller in (other["key"], MASTER)]
    mine = continue_(owner["key"], response_id)
    served = sum(r.status_code == 200 for r in foreign)
    report(
        Figure(
            store.name,
            "another key's (and the master key's) previous_response_id",
            len(foreign),
            served,
        )
    )
    assert unknown.status_code == 404, unknown.text
    unknown_error = error_of(unknown)
    assert unknown_error["code"] == "previous_response_not_found"
    for r in foreign:
        assert r.status_code == 404, r.text
        error = error_of(r)
        # the same answer as an unknown id, but for the id itself
        assert {**error, "message": error["message"].replace(response_id, unknown_id)} == (
            unknown_error
        )
        assert "my secret plan" not in r.text
    assert mine.status_code == 200, mine.text  # its creator continues it


# --- 6. count_tokens ---------------------------------------------------------------------------


def test_count_tokens_is_admitted_and_rate_limited(store: Store) -> None:
    key = store.new_key(rpm=2, budget_usd=1.0)
    body = {"model": "claude-priced", "messages": [{"role": "user", "content": "count me"}]}
    before = len(store.up.anthropic.requests)
    answers = []
    for i in range(4):  # the Anthropic header, then a bearer, in turn
        auth = (
            {"x-api-key": key["key"]} if i % 2 == 0 else {"Authorization": f"Bearer {key['key']}"}
        )
        answers.append(
            store.http.post(
                store.next_url() + "/v1/messages/count_tokens",
                content=json.dumps(body).encode(),
                headers={
                    **auth,
                    "Content-Type": "application/json",
                    "anthropic-version": "2023-06-01",
                },
            )
        )
    statuses = [r.status_code for r in answers]
    view = store.key_view(key["id"])
    report(
        Figure(store.name, "count_tokens, rpm 2", 4, statuses.count(200), None, view["spend_nanos"])
    )
    assert statuses == [200, 200, 429, 429], [r.text for r in answers]
    assert answers[0].json()["input_tokens"] > 0
    for r in answers[2:]:
        answer = r.json()
        assert answer["type"] == "error"
        assert answer["error"]["type"] == "rate_limit_error"
        assert answer["error"]["message"]
    assert len(store.up.anthropic.requests) == before + 2  # the refused ones went nowhere
    assert view["reserved_nanos"] == 0
    assert view["spend_nanos"] == 0


# --- 7. embeddings -----------------------------------------------------------------------------


def test_embeddings_are_rate_limited(store: Store) -> None:
    key = store.new_key(rpm=2)
    body = {"model": "emb/text-embedding-3-small", "input": "hello world"}
    answers = [store.post("/v1/embeddings", body, key["key"]) for _ in range(3)]
    statuses = [r.status_code for r in answers]
    report(Figure(store.name, "embeddings, rpm 2", 3, statuses.count(200)))
    assert statuses == [200, 200, 429], [r.text for r in answers]
    assert_rate_limited(answers[2])


@pytest.fixture(scope="module")
def one_slot(upstreams: Upstreams, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """A memory-store gateway whose keys may each have one request in flight."""
    extra = ", limits: {max_concurrent_streams_per_key: 1}"
    folder = tmp_path_factory.mktemp("hostile-one-slot")
    gateway = start_gateway(config("memory://", upstreams, extra), folder)
    s = Store("memory, one slot per key", [gateway], upstreams)
    try:
        yield s
    finally:
        s.close()
        stop_gateway(gateway)


def test_embeddings_hold_a_concurrency_slot(one_slot: Store) -> None:
    key = one_slot.new_key()
    body = {"model": "emb/lag", "input": "slow to embed"}
    lagging = one_slot.up.embeddings.lagging
    first: list[httpx.Response] = []
    worker = threading.Thread(
        target=lambda: first.append(one_slot.post("/v1/embeddings", body, key["key"]))
    )
    worker.start()
    try:
        for _ in range(200):  # until the first one is at the upstream (at most 2 s)
            if one_slot.up.embeddings.lagging > lagging:
                break
            time.sleep(0.01)
        second = one_slot.post("/v1/embeddings", body, key["key"])
    finally:
        worker.join(30)
    assert first, "the first request did not end"
    statuses = sorted([first[0].status_code, second.status_code])
    report(Figure(one_slot.name, "2 concurrent embeddings, 1 slot per key", 2, statuses.count(200)))
    assert first[0].status_code == 200, first[0].text
    assert second.status_code == 429, second.text
    assert error_of(second)["code"] == "too_many_streams_for_key"


# --- 8. client URLs and model names ------------------------------------------------------------


def test_a_storage_uri_is_not_passed_to_a_provider_that_reads_it(store: Store) -> None:
    key = store.new_key()
    image = {"type": "image_url", "image_url": {"url": "gs://operator-bucket/secret.png"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "describe"}, image]}]
    before = len(store.up.gemini.requests)
    refused = store.post(CHAT, {"model": "gem/text", "messages": messages}, key["key"])
    report(Figure(store.name, "gs:// image URL to gemini", 1, int(refused.status_code == 200)))
    assert refused.status_code == 400, refused.text
    error_of(refused)
    assert len(store.up.gemini.requests) == before  # nothing reached the upstream
    allowed = store.post(CHAT, {"model": "gemstore/text", "messages": messages}, key["key"])
    assert allowed.status_code == 200, allowed.text  # the provider's operator allows it
    assert "gs://operator-bucket/secret.png" in json.dumps(store.up.gemini.requests[-1].body)


@pytest.mark.parametrize("model", ["..", "up/..", "up/%2e%2e"])
def test_a_model_name_with_a_dot_segment_is_refused(store: Store, model: str) -> None:
    key = store.new_key()
    before = len(store.up.openai.requests)
    r = store.post(CHAT, body_of(model), key["key"])
    report(Figure(store.name, f"model {model!r}", 1, int(r.status_code == 200)))
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == "model"
    assert len(store.up.openai.requests) == before


# --- 9. slowloris ------------------------------------------------------------------------------


def test_a_trickled_request_head_is_cut_off(store: Store) -> None:
    """A header byte every 0.25 s for 10 s: the gateway closes the connection at its
    header timeout (1 s), with a 408 when it answers at all."""
    for url in store.urls:
        got = trickle(url, every_s=0.25, most_bytes=40)
        closed = f"closed after {got.seconds:.2f} s, status {got.status}" if got.closed else "open"
        report(Figure(store.name, f"slowloris, {got.sent} bytes trickled: {closed}", 1, 0))
        assert got.closed, got
        assert got.seconds < HEADER_TIMEOUT_S + 2.0, got  # the trickle would last 10 s
        assert got.status in (None, 408), got
