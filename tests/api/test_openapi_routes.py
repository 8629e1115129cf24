"""docs/openapi.yaml describes exactly the routes the app serves: every (method, path) of
the app is in the document and every operation of the document is a route of the app."""

from __future__ import annotations

from pathlib import Path

import yaml

from gateway.app import build_app
from gateway.config import parse_config

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
METHODS = {"get", "post", "put", "patch", "delete", "head", "options", "trace"}


def documented() -> set[tuple[str, str]]:
    doc = yaml.safe_load(OPENAPI.read_text())
    return {
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in METHODS
    }


def served() -> set[tuple[str, str]]:
    config = parse_config('store: {url: "memory://"}\nproviders: [{name: m, kind: mock}]', env={})
    routes = {
        (route.method, route.resource.canonical)
        for route in build_app(config).router.routes()
        if route.resource is not None
    }
    # aiohttp answers HEAD on every GET route by itself; the document describes the GET
    heads = {(m, p) for m, p in routes if m == "HEAD"}
    assert heads <= {("HEAD", p) for m, p in routes if m == "GET"}
    return routes - heads


def test_every_route_of_the_app_is_documented() -> None:
    assert served() - documented() == set()


def test_every_documented_operation_is_a_route() -> None:
    assert documented() - served() == set()


def test_document_is_openapi_3_1_with_both_security_schemes() -> None:
    doc = yaml.safe_load(OPENAPI.read_text())
    assert doc["openapi"].startswith("3.1")
    schemes = doc["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {**schemes["bearerAuth"], "type": "http", "scheme": "bearer"}
    assert schemes["apiKeyAuth"]["name"] == "x-api-key"
    messages = doc["paths"]["/v1/messages"]["post"]
    assert {"apiKeyAuth": []} in messages["security"]
