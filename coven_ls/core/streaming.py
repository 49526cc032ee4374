"""Blocks of assistant text and thinking while the model streams them: the text so far of each,
and which whole block (the CLI's assistant message, later) ends which stream. Pure: the session
feeds it the CLI's stream events and publishes what it returns.

A block is named by the model message's id and the block's index in it; the CLI's assistant
message that carries the whole block has the same message id (`message_id`), so its text and
thinking blocks end the open streams of that message in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol.events import PartialBlock
from ..protocol.types import StreamKind

_DELTA_KEYS: dict[str, tuple[StreamKind, str]] = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
}


@dataclass
class Piece:
    """A piece of a block: what a `coven/delta` carries."""

    block_id: str
    kind: StreamKind
    text: str
    parent_tool_use_id: str | None


@dataclass
class _Block:
    block_id: str
    message_id: str
    kind: StreamKind
    parent_tool_use_id: str | None
    text: str = ""


class Streams:
    def __init__(self) -> None:
        self._message: dict[str | None, str] = {}  # parent tool use -> its current message id
        self._blocks: dict[str, _Block] = {}  # block id -> block, in the order they started

    def feed(self, event: dict[str, Any], parent_tool_use_id: str | None) -> Piece | None:
        """Take one raw stream event (Anthropic's SSE payload); the piece of text it adds, if
        any. Events of other kinds (tool input, message deltas, pings) add nothing."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("id"), str):
                self._message[parent_tool_use_id] = message["id"]
            return None
        message_id = self._message.get(parent_tool_use_id)
        index = event.get("index")
        if message_id is None or not isinstance(index, int):
            return None
        block_id = f"{message_id}:{index}"
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            block_kind = block.get("type")
            if block_kind in ("text", "thinking"):
                self._blocks[block_id] = _Block(
                    block_id, message_id, block_kind, parent_tool_use_id
                )
            return None
        if kind != "content_block_delta":
            return None
        delta = event.get("delta") or {}
        keys = _DELTA_KEYS.get(delta.get("type", ""))
        open_block = self._blocks.get(block_id)
        if keys is None or open_block is None:
            return None
        text = delta.get(keys[1])
        if not isinstance(text, str) or not text:
            return None
        open_block.text += text
        return Piece(block_id, open_block.kind, text, parent_tool_use_id)

    def finish(self, message_id: str | None, kind: StreamKind) -> str | None:
        """A whole block of `kind` arrived in the CLI's assistant message `message_id`: the id
        of the stream it ends (the first open one of that message and kind), if it was
        streamed."""
        for block in self._blocks.values():
            if block.message_id == message_id and block.kind == kind:
                del self._blocks[block.block_id]
                return block.block_id
        return None

    def partial(self) -> list[PartialBlock]:
        return [
            PartialBlock(
                blockId=b.block_id, kind=b.kind, text=b.text, parentToolUseId=b.parent_tool_use_id
            )
            for b in self._blocks.values()
        ]

    def clear_all(self) -> None:
        self._blocks.clear()
        self._message.clear()

    def clear(self, parent_tool_use_id: str | None) -> None:
        """Drop what did not end in a whole block (a cut-off turn) of one agent: the main one
        (None) or a subagent."""
        for block_id in [
            b.block_id for b in self._blocks.values() if b.parent_tool_use_id == parent_tool_use_id
        ]:
            del self._blocks[block_id]
