"""`coven/event`s as terminal lines: the demo's (and any terminal client's) view of the tree."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from ..protocol import Kind
from ..protocol.describe import describe


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
