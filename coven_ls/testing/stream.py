"""A reply shaped as the Messages API sends it: its blocks made whole (tool ids, thinking
signatures), its token counts, its error body. The HTTP handler (server.py) writes them."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from .prompt_cache import CacheCharge
from .replies import Block, Reply, Text, Thinking, ToolUse, Usage
from .request import ModelRequest


def _mark_finished(req: ModelRequest) -> None:
    # Stamped just before the last write, not after it: a client that has read the whole
    # response must find `finished` set. A failing last write resets it.
    req.finished = time.monotonic()


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _signature(text: str) -> str:
    # Opaque to the client; derived from the text so the same thinking gets the same value.
    return "scripted-sig-" + uuid.uuid5(uuid.NAMESPACE_OID, text).hex


def _resolve_blocks(rep: Reply) -> list[Block]:
    return [
        ToolUse(b.name, b.input, "toolu_" + uuid.uuid4().hex[:24])
        if isinstance(b, ToolUse) and b.id is None
        else b
        for b in rep.blocks
    ]


def _full_block(block: Block) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Thinking):
        return {"type": "thinking", "thinking": block.text, "signature": _signature(block.text)}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}


def _output_tokens(blocks: Sequence[Block]) -> int:
    size = sum(
        len(b.text) if isinstance(b, (Text, Thinking)) else len(json.dumps(b.input)) for b in blocks
    )
    return max(1, size // 4)


def _charged_usage(rep: Reply, charge: CacheCharge) -> Usage:
    """What the reply reports: a rule's own usage, else what the prompt cache charged and the
    reply's own length."""
    if rep.usage is not None:
        return rep.usage
    return Usage(
        input_tokens=charge.input_tokens,
        output_tokens=_output_tokens(rep.blocks),
        cache_read_input_tokens=charge.cache_read_input_tokens,
        cache_creation_input_tokens=charge.cache_creation_input_tokens,
        cache_creation_1h_input_tokens=charge.cache_creation_1h_input_tokens,
    )


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}
