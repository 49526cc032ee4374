"""`coven/event`s (and `coven/delta` pieces) as terminal lines: the demo's (and any terminal
client's) view of the tree.

Streamed text is printed as it comes: a block's pieces go on its line one after the other, and
the block's `text` event then only ends that line (its whole text was printed already). When
something else must be printed while a block is still streaming (another session's line, a
question), the block's line is ended there and its next piece starts a new line marked `⏺ …`.

Isolated children (a git worktree each): the fork's line says where they work, a child's
`changes` event becomes a `± +40 −2 · 2 files changed` line under it, and the fork's end is
followed by one line per child saying what became of its changes (`merge_summary`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from ..protocol import Kind
from ..protocol.describe import change_counts, describe, one_line

# The statuses that run no turn: a block still streaming when one of them comes was cut off.
_TURN_OVER = frozenset({"idle", "failed", "cancelled", "closed", "interrupted"})
_MARKS = {"text": "⏺", "thinking": "✻"}
_FILE_MARKS = {"added": "A", "modified": "M", "deleted": "D", "renamed": "R"}
# How many changed files a question lists before it says how many more there are.
FILES_LISTED = 20
CONFLICTS_NAMED = 3


# --- isolated children's changes ------------------------------------------------------------------


def file_line(changed: Mapping[str, Any]) -> str:
    """`M docs/guide.md  +40 −2`, `R old.py → new.py  +1 −1`, `A logo.png  binary`."""
    mark = _FILE_MARKS.get(str(changed.get("status")), "?")
    path = str(changed["path"])
    if changed.get("oldPath"):
        path = f"{changed['oldPath']} → {path}"
    if changed.get("binary"):
        return f"{mark} {path}  binary"
    return f"{mark} {path}  +{changed.get('linesAdded') or 0} −{changed.get('linesRemoved') or 0}"


def file_listing(changes: Mapping[str, Any], indent: str = "  ") -> list[str]:
    """A child's changed files, one line each, cut after FILES_LISTED."""
    files = list(changes.get("files") or [])
    lines = [indent + file_line(f) for f in files[:FILES_LISTED]]
    if len(files) > FILES_LISTED:
        lines.append(f"{indent}… and {len(files) - FILES_LISTED} more")
    return lines


def _conflict_paths(conflicts: list[Mapping[str, Any]]) -> str:
    paths = [str(c.get("path")) for c in conflicts]
    shown = ", ".join(paths[:CONFLICTS_NAMED])
    more = len(paths) - CONFLICTS_NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def merge_line(result: Mapping[str, Any], changes: Mapping[str, Any] | None) -> str | None:
    """What became of one child's changes, from its `forkFinished` result (and its latest
    `changes` event, for the counts); None for a child that shared the parent's folder."""
    merge = result.get("merge") or (changes or {}).get("merge")
    if merge is None:
        return None
    label = one_line(str(result.get("label") or result.get("sessionId")), 60)
    counts = f" {change_counts(changes)}" if changes else ""
    branch = result.get("branch")
    on_branch = f" — work kept on branch {branch}" if branch else ""
    if merge == "applied":
        return f"✓ {label}: applied{counts}"
    if merge == "conflict":
        conflicts = list(result.get("conflicts") or (changes or {}).get("conflicts") or [])
        where = f" in {_conflict_paths(conflicts)}" if conflicts else ""
        return f"✗ {label}: conflict{where}{on_branch}"
    if merge == "discarded":
        return f"■ {label}: discarded{counts}{on_branch}"
    if merge == "kept":
        why = f" ({one_line(result['error'], 60)})" if result.get("error") else ""
        kept = f" —{counts} kept on branch {branch}" if branch else ""
        return f"! {label}: not merged, the task failed{why}{kept}"
    if merge == "unchanged":
        return f"· {label}: unchanged"
    return f"? {label}: {merge}{counts}"


def merge_summary(
    finished: Mapping[str, Any], changes: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """One line per child of a `forkFinished` event (those that worked in a worktree), given
    each child's latest `changes` by session id."""
    lines = []
    for result in finished.get("results") or []:
        line = merge_line(result, changes.get(str(result.get("sessionId"))))
        if line is not None:
            lines.append(line)
    return lines


@dataclass
class _Block:
    """A block of text or thinking that is streaming (`coven/delta`)."""

    session_id: str
    kind: str
    extra: int  # indent levels beyond the session's (a subagent's blocks sit deeper)
    parent: str | None
    text: str = ""  # the pieces so far
    printed: str = ""  # what of its rendering is on the terminal
    broken: bool = False  # other lines were printed since its last piece


class TreePrinter:
    """Prints events as they arrive, each session's lines indented under its place in the tree;
    streamed pieces (`delta()`) inline, as they come."""

    def __init__(
        self,
        out: TextIO = sys.stdout,
        *,
        as_json: bool = False,
        full_text: bool = False,
        json_deltas: bool = False,
    ) -> None:
        self._out = out
        self._json = as_json
        # With --json, deltas are printed too (as `{"delta": params}` lines) only when asked.
        self._json_deltas = json_deltas
        # With full_text, the assistant's text is printed whole (indented, line by line) rather
        # than cut to one line: what a terminal user reads as the answer.
        self._full_text = full_text
        self._depth: dict[str, int] = {}
        self._names: dict[str, str] = {}
        self._announced: set[str] = set()
        self._tags: dict[str, str] = {}
        self._blocks: dict[str, _Block] = {}
        self._open: _Block | None = None  # the block whose line the cursor is on
        self._tasks: dict[str, dict[str, Any]] = {}  # task id -> what its events said so far
        self.changes: dict[str, dict[str, Any]] = {}  # a child's latest `changes`, by session
        self._shown_commit: dict[str, str | None] = {}  # the work whose `±` line is printed

    def add_session(self, session_id: str, name: str, parent_id: str | None = None) -> None:
        """Name a session and place it in the tree before its first event arrives."""
        self._depth[session_id] = self._depth.get(parent_id, 0) + 1 if parent_id else 0
        self._names[session_id] = name

    # --- events ----------------------------------------------------------------------------------

    def __call__(self, event: dict[str, Any]) -> None:
        if event["kind"] == Kind.CHANGES:
            # Kept in JSON mode too: the fork's merge summary is made of them.
            self.changes[event["sessionId"]] = event["changes"]
        if self._json:
            self._out.write(json.dumps(event, ensure_ascii=False) + "\n")
            self._out.flush()
            return
        session_id, kind = event["sessionId"], event["kind"]
        self._announce(session_id)
        if kind == Kind.TASK:
            event = self._remember_task(event)
        extra = 2 if event.get("parentToolUseId") else 0
        block = self._blocks.pop(event.get("blockId") or "", None)
        if block is not None and kind in (Kind.TEXT, Kind.THINKING):
            self._finish(block, event)
        elif self._full_text and kind == Kind.TEXT:
            first, *rest = str(event["text"]).strip().splitlines() or [""]
            self._write(session_id, self._tags.get(session_id, "") + f"⏺ {first}", extra)
            for more in rest:
                self._write(session_id, f"  {more}" if more.strip() else "", extra)
        else:
            line = self._line(event)
            if line is not None:
                self._write(session_id, self._tags.get(session_id, "") + line, extra)
        if kind == Kind.FORK_FINISHED:
            # What became of each child's changes, under the fork's last line.
            for summary in merge_summary(event, self.changes):
                self._write(session_id, summary, 1)
        if kind in (Kind.TURN_RESULT, Kind.ERROR) or (
            kind == Kind.STATUS and event["status"] in _TURN_OVER
        ):
            # A block of the turn that got no event was cut off: its pieces stay as printed.
            # A subagent's go on after its parent's turn, unless the CLI went with it.
            everything = kind != Kind.TURN_RESULT
            self._drop(session_id, everything=everything)
        if kind == Kind.FORK_STARTED:
            count = len(event["children"])
            for number, child in enumerate(event["children"], 1):
                self.add_session(child["sessionId"], f"⑂ {child['label']}", session_id)
                # Children stream at the same time; the tag says whose line it is.
                self._tags[child["sessionId"]] = f"[{number}/{count}] "

    def delta(self, delta: dict[str, Any]) -> None:
        """A `coven/delta`: print the piece where its block's line is."""
        if self._json:
            if self._json_deltas:
                self._out.write(json.dumps({"delta": delta}, ensure_ascii=False) + "\n")
                self._out.flush()
            return
        session_id = delta["sessionId"]
        self._announce(session_id)
        block = self._blocks.get(delta["blockId"])
        if block is None:
            parent = delta.get("parentToolUseId")
            block = _Block(session_id, str(delta["kind"]), 2 if parent else 0, parent)
            self._blocks[delta["blockId"]] = block
        block.text += str(delta["text"])
        self._print_block(block, self._render(block.kind, block.text, final=False))

    def note(self, line: str) -> None:
        """A line of the client's own (not an event's), at the left margin."""
        self.break_line()
        self._out.write(line + "\n")
        self._out.flush()

    def break_line(self) -> None:
        """End the line of a block that is still streaming: something else is printed next."""
        if self._open is not None:
            self._open.broken = True
            self._open = None
            self._out.write("\n")
            self._out.flush()

    def _line(self, event: dict[str, Any]) -> str | None:
        kind = event["kind"]
        if kind == Kind.CHANGES:
            sid, changes = event["sessionId"], event["changes"]
            # Printed once per piece of work; a new `merge` alone is for the fork's summary.
            if sid in self._shown_commit and self._shown_commit[sid] == changes.get("commit"):
                return None
            self._shown_commit[sid] = changes.get("commit")
        return describe(event)

    # --- streamed blocks -------------------------------------------------------------------------

    def _render(self, kind: str, text: str, *, final: bool) -> str:
        """A block's text as printed (its lines joined with newlines, the tree's indent left
        out). While it streams, only what more text cannot change: so what was printed of it is
        always the beginning of what its whole text prints."""
        mark = _MARKS.get(kind, "⏺")
        if kind == "text" and self._full_text:
            first, *rest = text.strip().splitlines() or [""]
            return "\n".join([f"{mark} {first}", *(f"  {m}" if m.strip() else "" for m in rest)])
        if final:
            return f"{mark} {one_line(text)}"
        # one_line() cuts at 100 characters with an ellipsis: the 100th is not known yet.
        return f"{mark} {' '.join(text.split())[:99]}"

    def _print_block(self, block: _Block, rendered: str) -> None:
        if not rendered.startswith(block.printed) or len(rendered) == len(block.printed):
            return
        new = rendered[len(block.printed) :]
        block.printed = rendered
        indent = self._indent(block.session_id, block.extra)
        if self._open is not block:
            self.break_line()
            tag = self._tags.get(block.session_id, "")
            if block.broken:
                # It goes on below what came between: say which block this is.
                tag += f"{_MARKS.get(block.kind, '⏺')} …"
                new = new.lstrip("\n")
                block.broken = False
            self._out.write(indent + tag)
        first, *rest = new.split("\n")
        # Its later lines: indented under its first, blank ones left blank.
        self._out.write(first + "".join(f"\n{indent}{line}" if line else "\n" for line in rest))
        self._out.flush()
        self._open = block

    def _finish(self, block: _Block, event: dict[str, Any]) -> None:
        """The block's event: its whole text. What streamed is already on the terminal; print
        what is missing (the end of a one-line text) and end the line."""
        final = self._render(block.kind, str(event["text"]), final=True)
        if final.startswith(block.printed):
            self._print_block(block, final)
            if self._open is block:
                self._open = None
                self._out.write("\n")
                self._out.flush()
            return
        # The pieces were not the text after all (some went missing): print it whole.
        self.break_line()
        tag = self._tags.get(block.session_id, "")
        for number, line in enumerate(final.split("\n")):
            self._write(block.session_id, (tag if number == 0 else "") + line, block.extra)

    def _drop(self, session_id: str, *, everything: bool) -> None:
        for block_id, block in list(self._blocks.items()):
            if block.session_id == session_id and (everything or block.parent is None):
                del self._blocks[block_id]
                if self._open is block:
                    self.break_line()

    # --- lines -----------------------------------------------------------------------------------

    def _announce(self, session_id: str) -> None:
        if session_id not in self._announced:
            self._announced.add(session_id)
            name = self._names.get(session_id, f"session {session_id}")
            self._write(session_id, self._tags.get(session_id, "") + f"● {name}", -1)

    def _remember_task(self, event: dict[str, Any]) -> dict[str, Any]:
        """A task's later events may leave out what its first said (its description, its tool
        call): fill them in, so that each line says which task it is."""
        known = self._tasks.setdefault(event["taskId"], {})
        for key in ("description", "toolUseId"):
            if event.get(key):
                known[key] = event[key]
        return {**known, **event}

    def _indent(self, session_id: str, extra: int = 0) -> str:
        return "  " * (2 * self._depth.get(session_id, 0) + 1 + extra)

    def _write(self, session_id: str, line: str, extra: int = 0) -> None:
        self.break_line()
        indent = self._indent(session_id, extra) if line else ""
        self._out.write(f"{indent}{line}\n")
        self._out.flush()
