"""schemathesis against a live gateway, driven by docs/openapi.yaml.

For every operation of the document, requests are generated from its schemas (valid ones
and, on purpose, invalid ones) and sent to a real gateway process with the master key (sent
by an auth provider), in front of the `mock` provider, the fake OpenAI upstream (model
`text`) and the fake Anthropic upstream (model `claude`, so `count_tokens` can succeed and
`/v1/messages` takes its native path). A generated `model` is mostly replaced by one of
those (`route_models`), so requests get past routing; the rest stay unknown names (404).

Every answer must be no 5xx, a documented status with a conforming body, and every 4xx
must be JSON in the route's error shape (Anthropic's under /v1/messages, OpenAI's
elsewhere). The same operations are then run without any key: every route that needs one
answers 401 in that shape. Derandomized: the same cases on every run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings
from schemathesis import Case
from schemathesis import CheckContext
from schemathesis import Response
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance
from schemathesis.specs.openapi.checks import response_schema_conformance
from schemathesis.specs.openapi.checks import status_code_conformance

from tests.api.error_shapes import error_shape_problem
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.anthropic_upstream import FakeAnthropic
from tests.upstreams.openai_upstream import FakeOpenAI

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
MASTER_KEY = "sk-master-schemathesis-7f3a"
EXAMPLES_PER_OPERATION = 25
ANONYMOUS_EXAMPLES = 8
STATEFUL_SCENARIOS = 15
# models that get past routing on each route; other routes keep what was generated
ROUTE_MODELS = {
    "/v1/chat/completions": ("mock", "text"),
    "/v1/responses": ("mock", "text"),
    "/v1/messages": ("mock", "text", "claude"),
    "/v1/messages/count_tokens": ("claude",),
    "/v1/embeddings": ("mock",),
}
PUBLIC = frozenset({"/healthz", "/readyz", "/metrics"})
CASES: Counter[str] = Counter()
STATUSES: Counter[tuple[str, int]] = Counter()

authed = schemathesis.openapi.from_path(OPENAPI)
# The console's routes take its session cookie, not a key: without one they answer 401 like
# the rest, but its page and files are public (tests/server/test_console_api.py covers them)
anonymous = schemathesis.openapi.from_path(OPENAPI).exclude(path_regex="^/ui")


@authed.auth()
class MasterKey:
    def get(self, case: Case, ctx: Any) -> str:
        return MASTER_KEY

    def set(self, case: Case, data: str, ctx: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


def route_models(path: str, body: Any) -> Any:
    """`body` with its generated `model` replaced by a served one, two times in three
    (chosen by the generated name's length, so the run stays derandomized)."""
    models = ROUTE_MODELS.get(path)
    if not models or not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return body
    size = len(body["model"])
    if size % 3 == 0:
        return body
    return {**body, "model": models[size % len(models)]}


@authed.hook
def map_body(context: schemathesis.HookContext, body: Any) -> Any:
    assert context.operation is not None
    return route_models(context.operation.path, body)


def error_in_route_shape(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    content_type = response.headers.get("content-type", [""])[0]
    problem = error_shape_problem(
        case.operation.path, response.status_code, content_type, response.content
    )
    assert problem is None, problem
    return None


def counts_the_case(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    CASES[case.operation.label] += 1
    STATUSES[case.operation.label, response.status_code] += 1
    return None


CHECKS = [
    counts_the_case,
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    error_in_route_shape,
]


# --- the gateway ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gw-schemathesis")
    openai_up = FakeOpenAI().start()
    anthropic_up = FakeAnthropic().start()
    config = f"""
server: {{shutdown_grace_s: 2}}
store: {{url: "sqlite:///{tmp}/gateway.db"}}
auth: {{master_key: "{MASTER_KEY}"}}
providers:
  - {{name: mock, kind: mock}}
  - name: up
    kind: openai
    base_url: {openai_up.base_url}
    keys: [{{key: sk-upstream-openai}}]
  - name: claude
    kind: anthropic
    base_url: {anthropic_up.base_url}
    keys: [{{key: sk-upstream-anthropic}}]
models:
  - {{name: mock, targets: [{{provider: mock, model: mock}}]}}
  - {{name: text, targets: [{{provider: up, model: text}}]}}
  - {{name: claude, targets: [{{provider: claude, model: text}}]}}
"""
    gateway = start_gateway(config, tmp)
    yield gateway
    stop_gateway(gateway)
    anthropic_up.stop()
    openai_up.stop()
    print("\nschemathesis cases per operation:", dict(sorted(CASES.items())))
    print("schemathesis cases in all:", sum(CASES.values()))
    print("answers (operation, status): count:", dict(sorted(STATUSES.items())))


# --- the runs ---------------------------------------------------------------------------


@authed.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_with_the_master_key(case: Case, gw: Gateway) -> None:
    case.call_and_validate(base_url=gw.url, checks=CHECKS, timeout=20)


def test_admin_keys_as_a_state_machine(gw: Gateway) -> None:
    """Create a key, then read and revoke it through the document's links (ids that exist,
    which the per-operation runs never guess)."""
    base = authed.as_state_machine()

    class AdminKeys(base):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Case) -> dict[str, Any]:
            return {"base_url": gw.url, "timeout": 20}

        def validate_response(
            self, response: Response, case: Case, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            case.validate_response(response, checks=CHECKS)

    AdminKeys.run(
        settings=settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=4,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )


@anonymous.parametrize()
@settings(
    max_examples=ANONYMOUS_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_without_a_key(case: Case, gw: Gateway) -> None:
    if case.headers:
        # a generated Authorization or x-api-key would be a (wrong) key: this run sends none
        for name in [n for n in case.headers if n.lower() in {"authorization", "x-api-key"}]:
            del case.headers[name]
    response = case.call(base_url=gw.url, timeout=20)
    CASES["no key: " + case.operation.label] += 1
    content_type = response.headers.get("content-type", [""])[0]
    if case.method.upper() != case.operation.method.upper():
        # the coverage phase tries other methods: aiohttp's 405 comes before any auth
        assert response.status_code == 405, response.text
    elif case.operation.path in PUBLIC:
        assert response.status_code in {200, 503}
        return
    else:
        assert response.status_code == 401, response.text
    problem = error_shape_problem(
        case.operation.path, response.status_code, content_type, response.content
    )
    assert problem is None, problem


# --- the shape checks themselves --------------------------------------------------------


def test_shape_check_refuses_the_wrong_shape_per_route() -> None:
    openai_body = b'{"error": {"message": "m", "type": "t", "param": null, "code": null}}'
    anthropic_body = b'{"type": "error", "error": {"type": "t", "message": "m"}}'
    json_type = "application/json; charset=utf-8"
    assert error_shape_problem("/v1/chat/completions", 400, json_type, openai_body) is None
    assert error_shape_problem("/v1/messages", 400, json_type, anthropic_body) is None
    assert error_shape_problem("/v1/messages/count_tokens", 401, json_type, anthropic_body) is None
    assert error_shape_problem("/v1/messages", 400, json_type, openai_body)
    assert error_shape_problem("/v1/embeddings", 400, json_type, anthropic_body)
    assert error_shape_problem("/v1/embeddings", 400, "text/plain", openai_body)
    assert error_shape_problem("/admin/keys", 404, json_type, b"404: Not Found")
    assert error_shape_problem("/v1/models", 200, "text/plain", b"anything") is None


def test_route_models_keeps_some_unknown_names() -> None:
    bodies = [{"model": "x" * n, "messages": []} for n in range(6)]
    models = [route_models("/v1/messages", body)["model"] for body in bodies]
    assert models == ["", "text", "claude", "xxx", "text", "claude"]
    assert route_models("/admin/keys", {"model": "xy"}) == {"model": "xy"}
    assert route_models("/v1/embeddings", ["not", "an", "object"]) == ["not", "an", "object"]
