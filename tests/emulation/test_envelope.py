"""The envelope scanner: what a model's text becomes, whatever pieces it arrives in."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from gateway.emulation.envelope import MAX_ENVELOPE_CHARS
from gateway.emulation.envelope import EmulatedCall
from gateway.emulation.envelope import EnvelopeScanner
from gateway.emulation.envelope import Piece
from gateway.emulation.envelope import calls_in

NAMES = frozenset({"get_weather", "get_user"})
WEATHER = {"city": "Paris", "unit": "celsius"}
WEATHER_JSON = json.dumps(WEATHER, separators=(",", ":"))
ENVELOPE = json.dumps({"tool_calls": [{"name": "get_weather", "arguments": WEATHER}]})


def scan(text: str, cuts: list[int] | None = None) -> list[Piece]:
    """Feed `text` split at `cuts`; consecutive text pieces joined."""
    scanner = EnvelopeScanner(NAMES)
    bounds = [0, *sorted(set(cuts or [])), len(text)]
    pieces: list[Piece] = []
    for a, b in itertools.pairwise(bounds):
        pieces += scanner.feed(text[a:b])
    pieces += scanner.close()
    out: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] += piece
        elif piece != "":
            out.append(piece)
    return out


def weather() -> EmulatedCall:
    return EmulatedCall("get_weather", WEATHER_JSON)


def test_prose_is_text() -> None:
    assert scan("Sunny, 21 degrees.") == ["Sunny, 21 degrees."]


def test_envelope_after_a_sentence() -> None:
    assert scan(f"Let me check. {ENVELOPE}") == ["Let me check.", weather()]


def test_fenced_envelope_drops_its_fence_and_keeps_what_follows() -> None:
    text = f"I will check.\n\n```json\n{ENVELOPE}\n```\nBack soon."
    assert scan(text) == ["I will check.", weather(), "Back soon."]


def test_bare_fence_without_info_string() -> None:
    assert scan(f"```\n{ENVELOPE}\n```") == [weather()]


def test_two_calls_in_one_envelope_and_in_two() -> None:
    both = {
        "tool_calls": [
            {"name": "get_weather", "arguments": WEATHER},
            {"name": "get_user", "arguments": {"user_id": "u-42"}},
        ]
    }
    user = EmulatedCall("get_user", '{"user_id":"u-42"}')
    assert scan(json.dumps(both)) == [weather(), user]
    second = json.dumps({"name": "get_user", "arguments": {"user_id": "u-42"}})
    assert scan(f"{ENVELOPE}\n{second}") == [weather(), user]


def test_shapes_models_use_instead_of_the_envelope() -> None:
    shapes = [
        {"name": "get_weather", "arguments": WEATHER},
        {"name": "get_weather", "parameters": WEATHER},
        {"name": "get_weather", "arguments": json.dumps(WEATHER)},
        {"type": "function", "function": {"name": "get_weather", "arguments": WEATHER}},
    ]
    for shape in shapes:
        assert scan(json.dumps(shape)) == [weather()], shape
    assert scan('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris",}},]}') == [
        EmulatedCall("get_weather", '{"city":"Paris"}')
    ]
    assert calls_in('{"name": "get_user"}', NAMES) == [EmulatedCall("get_user", "{}")]


def test_unknown_names_and_non_envelopes_stay_text_byte_for_byte() -> None:
    texts = [
        'Calling: {"tool_calls": [{"name": "launch_rocket", "arguments": {}}]}',
        '{"tool_calls": [{"name": "get_weather", "arguments": {}}, {"name": "nope"}]}',
        'A set {1, 2} and a dict {"a": 1} and code `x = {}`.',
        '{"name": "get_weather", "arguments": [1, 2]}',
        '{"name": "get_weather", "arguments": {"broken": }',
        "```python\nprint({'a': 1})\n```",
        "``` not a fence ``",
    ]
    for text in texts:
        assert scan(text) == [text], text


def test_an_envelope_inside_a_non_envelope_object_is_found() -> None:
    assert scan(f'{{"answer": {ENVELOPE}}}') == ['{"answer":', weather(), "}"]


def test_unfinished_envelope_at_the_end_is_text() -> None:
    text = 'Sure. {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Pa'
    assert scan(text) == [text]


def test_strings_with_braces_and_escapes_do_not_end_the_object_early() -> None:
    args = {"query": 'a "}" and \\ and {', "n": 1}
    text = json.dumps({"name": "get_user", "arguments": args})
    expected = EmulatedCall("get_user", json.dumps(args, separators=(",", ":")))
    for cut in range(len(text)):
        assert scan(text, [cut]) == [expected]


def test_oversized_candidate_is_released_as_text() -> None:
    text = '{"name": "get_weather", "arguments": {"x": "' + "a" * (MAX_ENVELOPE_CHARS + 10)
    scanner = EnvelopeScanner(NAMES)
    out = []
    for i in range(0, len(text), 65536):
        out += scanner.feed(text[i : i + 65536])
    assert "".join(p for p in out if isinstance(p, str)) == text[: len("".join(out))]
    assert sum(len(p) for p in out if isinstance(p, str)) > MAX_ENVELOPE_CHARS


def test_prose_is_not_held_back() -> None:
    scanner = EnvelopeScanner(NAMES)
    assert scanner.feed("Hello") == ["Hello"]
    # rejected at its first key, not at the end of the object
    assert "".join(map(str, scanner.feed(" {1, 2}"))) == " {1, 2}"
    assert scanner.feed(' {"name') == []  # may be an envelope: held


ALPHABET = st.sampled_from([*list('{}[]"\\:, `\nab'), "get_weather", '"name"', "```json\n"])
TEXTS = st.lists(ALPHABET, max_size=40).map("".join) | st.sampled_from(
    [
        f"Let me check. {ENVELOPE}",
        f"I will check.\n\n```json\n{ENVELOPE}\n```\nBack soon.",
        f'{{"answer": {ENVELOPE}}} `x` {{"a": 1}}',
    ]
)


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_split_anywhere_same_answer(text: str, cuts: list[int]) -> None:
    cuts = [c for c in cuts if c <= len(text)]
    whole = scan(text)
    assert scan(text, cuts) == whole
    assert scan(text, list(range(len(text)))) == whole
    if not any(isinstance(p, EmulatedCall) for p in whole):
        assert whole == ([text] if text else [])  # nothing is lost or changed
