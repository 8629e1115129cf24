"""The output items of a Responses stream while they are being streamed (`OpenItem`), and the
finished `OutputItem` each becomes. Sans-IO."""

from __future__ import annotations

from gateway.inbound.responses_events import FunctionCallItem
from gateway.inbound.responses_events import MessageItem
from gateway.inbound.responses_events import OutputItem
from gateway.inbound.responses_events import OutputText
from gateway.inbound.responses_events import ReasoningItem
from gateway.inbound.responses_events import ReasoningText
from gateway.inbound.responses_events import RefusalPart


class OpenItem:
    """An output item being streamed."""

    __slots__ = ("call_id", "id", "kind", "name", "output_index", "parts")

    def __init__(self, kind: str, id: str, output_index: int) -> None:
        self.kind = kind  # "message" | "reasoning" | "function_call"
        self.id = id
        self.output_index = output_index
        self.parts: list[tuple[str, list[str]]] = []  # (part type, text pieces); last is open
        self.call_id = ""
        self.name = ""


def item_of(item: OpenItem, status: str) -> OutputItem:
    if item.kind == "function_call":
        args = "".join(item.parts[0][1]) if item.parts else ""
        return FunctionCallItem(item.id, status, args, item.call_id, item.name)
    texts = (
        [(part, "".join(pieces)) for part, pieces in item.parts] if status != "in_progress" else []
    )
    if item.kind == "reasoning":
        return ReasoningItem(item.id, status, [ReasoningText(t) for _, t in texts])
    content: list[OutputText | RefusalPart] = [
        RefusalPart(t) if part == "refusal" else OutputText(t) for part, t in texts
    ]
    return MessageItem(item.id, status, content)
