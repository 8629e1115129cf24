"""retry_after_s: every form a provider uses to say how long to wait."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.routing.retry_after import MAX_WAIT_S
from gateway.routing.retry_after import go_duration_s
from gateway.routing.retry_after import retry_after_s as read_wait

# the reset header families the OpenAI and Anthropic adapters declare
FAMILIES = OpenAIAdapter.rate_limits + AnthropicAdapter.rate_limits


def retry_after_s(headers: dict[str, str], now: float) -> float | None:
    return read_wait(headers, now, FAMILIES)


NOW = 1_750_000_000.0


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # the finer one wins
        ({"retry-after": formatdate(NOW + 42, usegmt=True)}, 42.0),
        ({"x-ratelimit-reset-requests": "1s"}, 1.0),
        ({"x-ratelimit-reset-requests": "6m0s"}, 360.0),
        ({"x-ratelimit-reset-tokens": "20ms"}, 0.02),
        # the spent limit says how long, not the sooner one
        (
            {
                "x-ratelimit-remaining-requests": "12",
                "x-ratelimit-reset-requests": "100ms",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "2m30s",
            },
            150.0,
        ),
        # none known spent: the soonest reset
        ({"x-ratelimit-reset-requests": "3s", "x-ratelimit-reset-tokens": "1s"}, 1.0),
        ({"anthropic-ratelimit-requests-reset": "2025-06-15T15:07:00Z"}, 1_750_000_020.0 - NOW),
        (
            {
                "anthropic-ratelimit-requests-reset": "2025-06-15T15:06:50Z",
                "anthropic-ratelimit-tokens-remaining": "0",
                "anthropic-ratelimit-tokens-reset": "2025-06-15T15:07:30+00:00",
            },
            50.0,
        ),
    ],
)
def test_forms(headers: dict[str, str], wait: float) -> None:
    assert retry_after_s(headers, NOW) == pytest.approx(wait, abs=1e-6)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"retry-after": "soon"},
        {"retry-after": "nan"},
        {"retry-after-ms": "x"},
        {"x-ratelimit-reset-requests": "1 s"},
        {"x-ratelimit-reset-requests": "s"},
        {"anthropic-ratelimit-requests-reset": "tomorrow"},
        {"anthropic-ratelimit-requests-reset": "2025-06-15T15:07:00"},  # no zone
        {"content-type": "application/json"},
    ],
)
def test_unreadable_or_absent_says_nothing(headers: dict[str, str]) -> None:
    assert retry_after_s(headers, NOW) is None


def test_unreadable_form_falls_through_to_the_next() -> None:
    assert retry_after_s({"retry-after": "soon", "x-ratelimit-reset-requests": "2s"}, NOW) == 2.0


def test_clamped() -> None:
    assert retry_after_s({"retry-after": "-5"}, NOW) == 0.0
    assert retry_after_s({"retry-after": formatdate(NOW - 60, usegmt=True)}, NOW) == 0.0
    assert retry_after_s({"retry-after": "86400"}, NOW) == MAX_WAIT_S


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h2m3.5s", 3723.5), ("0s", 0.0), ("1.5", 1.5), ("500us", 0.0005), ("2m", 120.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1x", "s1", "1s 2m", "1s-"])
def test_bad_go_durations(text: str) -> None:
    assert go_duration_s(text) is None


def test_reset_families_are_read_only_for_the_adapter_that_declares_them() -> None:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "3s"}
    assert read_wait(headers, NOW, OpenAIAdapter.rate_limits) == 3.0
    assert read_wait(headers, NOW, AnthropicAdapter.rate_limits) is None
    assert read_wait(headers, NOW) is None
