"""Blocks of assistant text and thinking while the model streams them: the text so far of each,
and which whole block (the agent's finished message, later) ends which stream. Pure: the session
feeds it the agent's `BlockStarted` and `Delta` events (core/agent/events.py) and publishes what
it returns.

A block belongs to a model call (`call_id`); the finished message that carries the whole block
comes from the same call, so its text and thinking parts end the open streams of that call in
order.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol.events import PartialBlock
from ...protocol.types import StreamKind
from ..agent.events import BlockStarted, Delta


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
    call_id: str
    kind: StreamKind
    parent_tool_use_id: str | None
    text: str = ""


class Streams:
    def __init__(self) -> None:
        self._blocks: dict[str, _Block] = {}  # block id -> block, in the order they started

    def start(self, event: BlockStarted) -> None:
        """A block of text or thinking starts streaming."""
        self._blocks[event.block_id] = _Block(
            event.block_id, event.call_id, event.kind, event.parent_tool_call_id
        )

    def feed(self, delta: Delta) -> Piece | None:
        """A piece of a block; what a `coven/delta` carries, if the block is still open (the
        pieces of one that did not start, or was dropped, are not shown)."""
        open_block = self._blocks.get(delta.block_id)
        if open_block is None or not delta.text:
            return None
        open_block.text += delta.text
        return Piece(delta.block_id, open_block.kind, delta.text, delta.parent_tool_call_id)

    def finish(self, call_id: str | None, kind: StreamKind) -> str | None:
        """A whole block of `kind` arrived in a finished message of the model call `call_id`: the
        id of the stream it ends (the first open one of that call and kind), if it was
        streamed."""
        for block in self._blocks.values():
            if block.call_id == call_id and block.kind == kind:
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

    def clear(self, parent_tool_use_id: str | None) -> None:
        """Drop what did not end in a whole block (a cut-off turn) of one agent: the main one
        (None) or a subagent."""
        for block_id in [
            b.block_id for b in self._blocks.values() if b.parent_tool_use_id == parent_tool_use_id
        ]:
            del self._blocks[block_id]
