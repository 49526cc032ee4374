"""A Codex thread's conversation read back through the app-server (`thread/items/list`, which
holds a forked thread's inherited items too), as the entries a `"transcript"` fork child is
given (core/fork/transcript.py)."""

from __future__ import annotations

import json
from typing import Any

from ...core.agent import Entry
from .appserver import AppServer

_PAGES = 1000  # of 100 items: a bound, not a limit anyone meets


def entries_of(item: dict[str, Any]) -> list[Entry]:
    kind = item.get("type")
    if kind == "userMessage":
        texts = [
            str(part.get("text") or "")
            for part in item.get("content") or []
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        text = "\n".join(t for t in texts if t)
        return [Entry("user", text)] if text else []
    if kind == "agentMessage":
        text = str(item.get("text") or "")
        return [Entry("assistant", text)] if text else []
    if kind == "reasoning":
        return [Entry("thinking", json.dumps(item.get("summary") or item.get("content") or ""))]
    if kind == "commandExecution":
        code = item.get("exitCode")
        output = str(item.get("aggregatedOutput") or "")
        return [
            Entry("toolCall", json.dumps({"command": item.get("command")}), name="Bash"),
            Entry("toolResult", output, error=code not in (0, None)),
        ]
    if kind == "fileChange":
        diffs = [
            f"{change.get('path')}\n{change.get('diff') or ''}"
            for change in item.get("changes") or []
            if isinstance(change, dict)
        ]
        return [
            Entry("toolCall", "\n".join(diffs), name="Edit"),
            Entry(
                "toolResult", str(item.get("status") or ""), error=item.get("status") == "failed"
            ),
        ]
    # Other tools (MCP, web search, ...): their whole item, as the call.
    rest = {k: v for k, v in item.items() if k not in ("id", "type")}
    return [Entry("toolCall", json.dumps(rest, ensure_ascii=False), name=str(kind or "tool"))]


async def read_conversation(server: AppServer, thread_id: str, up_to: str | None) -> list[Entry]:
    """The thread's conversation, oldest first, up to and including the item `up_to` (an agent
    message's id: coven's messageId) when given."""
    entries: list[Entry] = []
    cursor: str | None = None
    for _page in range(_PAGES):
        params: dict[str, Any] = {"threadId": thread_id, "limit": 100}
        if cursor:
            params["cursor"] = cursor
        page = await server.request("thread/items/list", params)
        for row in page.get("data") or []:
            item = row.get("item") or {}
            entries += entries_of(item)
            if up_to is not None and item.get("id") == up_to:
                return entries
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return entries
