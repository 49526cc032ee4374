"""`coven/event`s as terminal lines: the demo's (and any terminal client's) view of the tree."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from .wire import Kind

STATUS_MARKS = {
    "starting": "…",
    "running": "▶",
    "idle": "✓",
    "awaitingApproval": "?",
    "forking": "⑂",
    "failed": "✗",
    "cancelled": "■",
    "closed": "◼",
    "interrupted": "!",
}


def one_line(text: str, limit: int = 100) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def summarize_input(tool_input: dict[str, Any], limit: int = 80) -> str:
    """What a tool call will do, in one line: its command, path, URL or pattern if it has one."""
    for key in ("command", "file_path", "path", "url", "pattern", "prompt", "description"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return one_line(value, limit)
    return one_line(json.dumps(tool_input, ensure_ascii=False), limit)


def describe(event: dict[str, Any]) -> str | None:
    """One line for an event, or None for events a reader does not need to see."""
    kind = event["kind"]
    if kind == Kind.STATUS:
        return f"{STATUS_MARKS.get(event['status'], '·')} {event['status']}"
    if kind == Kind.PROMPT:
        who = "you" if event.get("origin") == "user" else event.get("origin", "server")
        return f"› {who}: {one_line(event['text'])}"
    if kind == Kind.AGENT:
        return f"· agent session {event.get('agentSessionId')} ({event.get('model')})"
    if kind == Kind.TEXT:
        return f"⏺ {one_line(event['text'])}"
    if kind == Kind.THINKING:
        return f"✻ {one_line(event['text'])}"
    if kind == Kind.TOOL_USE:
        return f"⚙ {event['name']}  {summarize_input(event['input'])}"
    if kind == Kind.TOOL_RESULT:
        mark = "✗" if event.get("isError") else "↳"
        return f"  {mark} {one_line(event.get('content', ''), 90)}"
    if kind == Kind.PERMISSION_REQUEST:
        return f"? {event['toolName']} asks for permission"
    if kind == Kind.PERMISSION_DECISION:
        return f"  {'allowed' if event['allow'] else 'denied'} {event['toolName']}"
    if kind == Kind.TURN_RESULT:
        if event.get("cancelled"):
            return "■ turn cancelled"
        mark = "✗ turn failed" if event.get("isError") else "✓ turn done"
        seconds = (event.get("durationMs") or 0) / 1000
        return f"{mark} ({seconds:.1f} s, ${event.get('costUsd') or 0:.4f})"
    if kind == Kind.ERROR:
        return f"✗ error: {event['message']}"
    if kind == Kind.FORK_PROPOSED:
        tasks = event["tasks"]
        return f"⑂ Fork proposed  {len(tasks)} task{'s' * (len(tasks) != 1)}: {'; '.join(tasks)}"
    if kind == Kind.FORK_STARTED:
        count = len(event["children"])
        return f"⑂ Fork  {count} task{'s' * (count != 1)}"
    if kind == Kind.FORK_FINISHED:
        results = event["results"]
        ok = sum(1 for r in results if r["ok"])
        return f"⑂ Fork done  {ok} of {len(results)} tasks succeeded"
    if kind == Kind.FORK_REJECTED:
        reason = event.get("reason")
        return "⑂ Fork rejected" + (f": {reason}" if reason else "")
    if kind == Kind.FORK_INTERRUPTED:
        count = len(event["unfinished"])
        return f"⑂ Fork interrupted  {count} unfinished: resume or abandon it"
    if kind == Kind.FORK_RESUMED:
        count = len(event["children"])
        return f"⑂ Fork resumed  {count} task{'s' * (count != 1)} again"
    if kind == Kind.FORK_ERROR:
        return f"⑂ Fork tag refused: {one_line(event['message'])}"
    return None


class TreePrinter:
    """Prints events as they arrive, each session's lines indented under its place in the tree."""

    def __init__(
        self, out: TextIO = sys.stdout, *, as_json: bool = False, full_text: bool = False
    ) -> None:
        self._out = out
        self._json = as_json
        # With full_text, the assistant's text is printed whole (indented, line by line) rather
        # than cut to one line: what a terminal user reads as the answer.
        self._full_text = full_text
        self._depth: dict[str, int] = {}
        self._names: dict[str, str] = {}
        self._announced: set[str] = set()
        self._tags: dict[str, str] = {}

    def add_session(self, session_id: str, name: str, parent_id: str | None = None) -> None:
        """Name a session and place it in the tree before its first event arrives."""
        self._depth[session_id] = self._depth.get(parent_id, 0) + 1 if parent_id else 0
        self._names[session_id] = name

    def __call__(self, event: dict[str, Any]) -> None:
        if self._json:
            self._out.write(json.dumps(event, ensure_ascii=False) + "\n")
            self._out.flush()
            return
        session_id = event["sessionId"]
        if session_id not in self._announced:
            self._announced.add(session_id)
            name = self._names.get(session_id, f"session {session_id}")
            self._write(session_id, self._tags.get(session_id, "") + f"● {name}", -1)
        line = describe(event)
        if self._full_text and event["kind"] == Kind.TEXT:
            first, *rest = str(event["text"]).strip().splitlines() or [""]
            self._write(session_id, self._tags.get(session_id, "") + f"⏺ {first}")
            for more in rest:
                self._write(session_id, f"  {more}" if more.strip() else "")
        elif line is not None:
            self._write(session_id, self._tags.get(session_id, "") + line)
        if event["kind"] == Kind.FORK_STARTED:
            count = len(event["children"])
            for number, child in enumerate(event["children"], 1):
                self.add_session(child["sessionId"], f"⑂ {child['label']}", session_id)
                # Children stream at the same time; the tag says whose line it is.
                self._tags[child["sessionId"]] = f"[{number}/{count}] "

    def _write(self, session_id: str, line: str, extra: int = 0) -> None:
        indent = "  " * (2 * self._depth.get(session_id, 0) + 1 + extra) if line else ""
        self._out.write(f"{indent}{line}\n")
        self._out.flush()
