"""A Claude Code conversation read back from the CLI's transcript (`<config>/projects/<cwd>/
<id>.jsonl`, through claude-agent-sdk's reader, which follows the `parentUuid` chain and leaves
out meta and sidechain lines), as the entries a `"transcript"` fork child is given
(core/fork/transcript.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from ...core.agent import Entry

# The CLI's own notes to the model inside user messages: not the conversation.
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if block.get("type") == "text":
                    parts.append(str(block.get("text") or ""))
                else:
                    parts.append(f"[{block.get('type', 'content')}]")
        return "\n".join(parts)
    return "" if content is None else str(content)


def entries_of(message_type: str, message: Any) -> list[Entry]:
    """The entries of one transcript message (its `message`: role and content)."""
    content = message.get("content") if isinstance(message, dict) else None
    blocks: list[Any] = [{"type": "text", "text": content}] if isinstance(content, str) else []
    if isinstance(content, list):
        blocks = content
    entries: list[Entry] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            text = str(block.get("text") or "")
            if message_type == "user":
                text = _REMINDER.sub("", text).strip()
            if text:
                entries.append(Entry("user" if message_type == "user" else "assistant", text))
        elif kind in ("thinking", "redacted_thinking"):
            entries.append(Entry("thinking", str(block.get("thinking") or "")))
        elif kind == "tool_use":
            tool_input = json.dumps(block.get("input") or {}, ensure_ascii=False)
            entries.append(Entry("toolCall", tool_input, name=str(block.get("name") or "tool")))
        elif kind == "tool_result":
            entries.append(
                Entry(
                    "toolResult",
                    _result_text(block.get("content")),
                    error=bool(block.get("is_error")),
                )
            )
        elif kind == "image":
            entries.append(Entry("user" if message_type == "user" else "assistant", "[image]"))
    return entries


def read_conversation(session_id: str, cwd: str, up_to: str | None) -> list[Entry]:
    """The conversation, oldest first, up to and including the message `up_to` (a line's uuid:
    coven's messageId) when given. Blocking: it reads a file."""
    from claude_agent_sdk import get_session_messages

    entries: list[Entry] = []
    for message in get_session_messages(session_id, directory=cwd):
        entries += entries_of(message.type, message.message)
        if up_to is not None and message.uuid == up_to:
            break
    return entries
