"""Gemini's thoughtSignature travels to the client inside the tool-call id and back."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from gateway.framing.sse import SSEDecoder
from gateway.providers.gemini.adapter import GeminiStreamTranslator
from gateway.providers.gemini.request import signature_of
from gateway.providers.gemini.request import signed_call_id
from gateway.providers.gemini.request import translate_messages
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import Message
from tests.fixtures import FIXTURES
from tests.providers.test_gemini import make_call  # the Gemini tests' UpstreamCall builder

SAFE = re.compile(r"[A-Za-z0-9_-]+")


@given(
    signature=st.text(min_size=1, max_size=300),
    base=st.from_regex(r"call_[a-z0-9_]{1,30}", fullmatch=True),
)
def test_round_trip(signature: str, base: str) -> None:
    call_id = signed_call_id(base, signature)
    assert signature_of(call_id) == signature
    assert call_id.endswith(base)
    assert SAFE.fullmatch(call_id)


def test_unsigned_and_foreign_ids_carry_nothing() -> None:
    assert signed_call_id("call_x_0", None) == "call_x_0"
    for foreign in ["call_x_0", "toolu_01", "gts", "gts12_abc", "gtsx_y_z", "gts3_abcd"]:
        assert signature_of(foreign) is None


def test_fixture_signature_reaches_the_next_request() -> None:
    data = (FIXTURES / "gemini_function_calls.sse").read_bytes()
    signature = data.split(b'"thoughtSignature": "')[1].split(b'"')[0].decode()
    decoder = SSEDecoder()
    translator = GeminiStreamTranslator(make_call())
    acc = StreamAccumulator()
    for event in [*decoder.feed(data), *decoder.close()]:
        for item in translator.feed(event):
            acc.add(item.chunk)
    for item in translator.close():
        acc.add(item.chunk)
    message = acc.message()
    assert message.tool_calls is not UNSET
    call = message.tool_calls[0]
    assert signature_of(call.id) == signature
    history = [
        Message(role="user", content="hi"),
        Message(role="assistant", content=None, tool_calls=[call]),
        Message(role="tool", tool_call_id=call.id, content="{}"),
    ]
    _, contents = translate_messages(history)
    part = contents[1].parts[0]
    assert part.function_call is not UNSET
    assert part.thought_signature == signature
