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

import msgspec

from ..protocol import events as ev
from ..protocol.describe import (
    PLAN_MARKS,
    change_counts,
    describe_payload,
    fork_cost,
    one_line,
)
from ..protocol.labels import FILE_MARKS
from ..protocol.tree import SessionTree
from ..protocol.types import SETTLED_STATUSES, Changes, ConflictFile, ForkEstimate, Sandbox

_MARKS = {"text": "⏺", "thinking": "✻"}
# How many changed files a question lists before it says how many more there are.
FILES_LISTED = 20
CONFLICTS_NAMED = 3


# --- isolated children's changes ------------------------------------------------------------------


def estimate_lines(proposed: Mapping[str, Any], children: int) -> str:
    """A fork question's context and cost lines (each ending in a newline), for `children`
    children (the user may have edited the task list); empty without an estimate."""
    raw = proposed.get("estimate")
    if not raw:
        return ""
    estimate = msgspec.convert(raw, ForkEstimate)
    if children != estimate.children and estimate.children:
        per_child = None if estimate.costUsd is None else estimate.costUsd / estimate.children
        estimate = msgspec.structs.replace(
            estimate,
            children=children,
            tokens=estimate.tokens * children // estimate.children,  # what one child reads
            costUsd=None if per_child is None else round(per_child * children, 6),
        )
    return "".join(f"{line}\n" for line in fork_cost(estimate))


def plan_lines(entries: list[ev.PlanEntry]) -> list[str]:
    """A plan: its heading, then a line per step, `[x] done`, `[>] in progress`, `[ ] pending`."""
    done = sum(1 for e in entries if e.status == "completed")
    heading = f"☰ plan {done}/{len(entries)} done"
    return [heading, *(f"{PLAN_MARKS[e.status]} {one_line(e.content, 160)}" for e in entries)]


def file_line(changed: Mapping[str, Any]) -> str:
    """`M docs/guide.md  +40 −2`, `R old.py → new.py  +1 −1`, `A logo.png  binary`."""
    mark = FILE_MARKS.get(str(changed.get("status")), "?")
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


def _conflict_paths(conflicts: list[ConflictFile]) -> str:
    paths = [c.path for c in conflicts]
    shown = ", ".join(paths[:CONFLICTS_NAMED])
    more = len(paths) - CONFLICTS_NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def merge_line(result: ev.TaskOutcome, changes: Changes | None) -> str | None:
    """What became of one child's changes, from its `forkFinished` result (and its latest
    `changes` event, for the counts); None for a child that shared the parent's folder."""
    merge = result.merge or (changes.merge if changes else None)
    if merge is None:
        return None
    label = one_line(result.label or result.sessionId, 60)
    counts = f" {change_counts(changes)}" if changes else ""
    branch = result.branch
    on_branch = f" — work kept on branch {branch}" if branch else ""
    if merge == "applied":
        return f"✓ {label}: applied{counts}"
    if merge == "conflict":
        conflicts = result.conflicts or (changes.conflicts if changes else [])
        where = f" in {_conflict_paths(conflicts)}" if conflicts else ""
        return f"✗ {label}: conflict{where}{on_branch}"
    if merge == "discarded":
        return f"■ {label}: discarded{counts}{on_branch}"
    if merge == "kept":
        kept = f" —{counts} kept on branch {branch}" if branch else ""
        if result.stopped == "limit":
            return f"! {label}: not merged, stopped at its limit ({result.limit}){kept}"
        why = f" ({one_line(result.error, 60)})" if result.error else ""
        return f"! {label}: not merged, the task failed{why}{kept}"
    if merge == "unchanged":
        return f"· {label}: unchanged"
    return f"? {label}: {merge}{counts}"


def sandbox_note(sandbox: Sandbox) -> str:
    """How the operating system holds a fork child: `fenced by claude (network: full)`, or
    `unfenced: <why>`."""
    if sandbox.fenced:
        by = f" by {sandbox.by}" if sandbox.by else ""
        network = f" (network: {sandbox.network})" if sandbox.network else ""
        return f"fenced{by}{network}"
    return f"unfenced: {sandbox.reason}" if sandbox.reason else "unfenced"


def merge_summary(tree: SessionTree, fork_id: str) -> list[str]:
    """One line per child of a finished fork (those that worked in a worktree), from its
    `forkFinished` results and each child's latest `changes`."""
    fork = tree.forks.get(fork_id)
    lines = []
    for result in fork.results if fork is not None else ():
        line = merge_line(result, tree.session(result.sessionId).changes)
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
        # Sessions, forks, children and their changes (kept in JSON mode too: the fork's merge
        # summary is made of them).
        self.tree = SessionTree()
        self._depth: dict[str, int] = {}  # sessions placed by add_session (others: by the tree)
        self._names: dict[str, str] = {}
        self._announced: set[str] = set()
        self._tags: dict[str, str] = {}
        # A fork child's: how it is held (its forkStarted entry says), on its first line.
        self._held: dict[str, str] = {}
        self._blocks: dict[str, _Block] = {}
        self._open: _Block | None = None  # the block whose line the cursor is on
        self._tasks: dict[str, ev.Task] = {}  # task id -> what its events said so far
        self._shown_commit: dict[str, str | None] = {}  # the work whose `±` line is printed

    def add_session(self, session_id: str, name: str, parent_id: str | None = None) -> None:
        """Name a session and place it in the tree before its first event arrives."""
        self._depth[session_id] = self._depth.get(parent_id, 0) + 1 if parent_id else 0
        self._names[session_id] = name

    # --- events ----------------------------------------------------------------------------------

    def __call__(self, event: dict[str, Any]) -> None:
        typed = self.tree.apply(event)
        if self._json:
            self._out.write(json.dumps(event, ensure_ascii=False) + "\n")
            self._out.flush()
            return
        session_id = event["sessionId"]
        self._announce(session_id)
        if typed is None:
            return  # a kind this client does not know
        payload = typed.payload
        if isinstance(payload, ev.Task):
            payload = self._remember_task(payload)
        parent = getattr(payload, "parentToolUseId", None)
        extra = 2 if parent else 0
        block = self._blocks.pop(getattr(payload, "blockId", None) or "", None)
        match payload:
            case ev.Text(text=text) | ev.Thinking(text=text) if block is not None:
                self._finish(block, text)
            case ev.Text(text=text) if self._full_text:
                first, *rest = text.strip().splitlines() or [""]
                self._write(session_id, self._tags.get(session_id, "") + f"⏺ {first}", extra)
                for more in rest:
                    self._write(session_id, f"  {more}" if more.strip() else "", extra)
            case ev.Plan(entries=entries):
                tag = self._tags.get(session_id, "")
                for number, step in enumerate(plan_lines(entries)):
                    self._write(
                        session_id, (tag if number == 0 else "") + step, extra + min(number, 1)
                    )
            case _:
                line = self._line(session_id, payload)
                if line is not None:
                    self._write(session_id, self._tags.get(session_id, "") + line, extra)
        match payload:
            case ev.ForkFinished():
                # What became of each child's changes, under the fork's last line.
                for summary in merge_summary(self.tree, payload.forkId):
                    self._write(session_id, summary, 1)
            case ev.TurnResult():
                # A block of the turn that got no event was cut off: its pieces stay as printed.
                # A subagent's go on after its parent's turn, unless the CLI went with it.
                self._drop(session_id, everything=False)
            case ev.Error():
                self._drop(session_id, everything=True)
            case ev.StatusChanged(status=status) if status in SETTLED_STATUSES:
                self._drop(session_id, everything=True)
            case ev.ForkStarted(children=children, isolation=isolation):
                for number, child in enumerate(children, 1):
                    # Children stream at the same time; the tag says whose line it is.
                    self._tags[child.sessionId] = f"[{number}/{len(children)}] "
                    # Children sharing the parent's folder are never fenced (the fork's line
                    # says they share it): only worktree children say how they are held.
                    if child.sandbox is not None and isolation == "worktree":
                        self._held[child.sessionId] = f" · {sandbox_note(child.sandbox)}"
                    if child.placement is not None:  # its node comes with its `placed` line
                        where = f" · on the {child.placement.cluster} cluster"
                        self._held[child.sessionId] = self._held.get(child.sessionId, "") + where

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

    def _line(self, session_id: str, payload: ev.Payload) -> str | None:
        if isinstance(payload, ev.ChangesEvent):
            commit = payload.changes.commit
            # Printed once per piece of work; a new `merge` alone is for the fork's summary.
            if session_id in self._shown_commit and self._shown_commit[session_id] == commit:
                return None
            self._shown_commit[session_id] = commit
        return describe_payload(payload)

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

    def _finish(self, block: _Block, text: str) -> None:
        """The block's event: its whole text. What streamed is already on the terminal; print
        what is missing (the end of a one-line text) and end the line."""
        final = self._render(block.kind, text, final=True)
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
            label = self.tree.session(session_id).label
            name = self._names.get(session_id) or (
                f"⑂ {label}" if label is not None else f"session {session_id}"
            )
            held = self._held.get(session_id, "")
            self._write(session_id, self._tags.get(session_id, "") + f"● {name}{held}", -1)

    def _remember_task(self, task: ev.Task) -> ev.Task:
        """A task's later events may leave out what its first said (its description, its tool
        call): fill them in, so that each line says which task it is."""
        known = self._tasks.get(task.taskId)
        if known is not None:
            task = msgspec.structs.replace(
                task,
                description=task.description or known.description,
                toolUseId=task.toolUseId or known.toolUseId,
            )
        self._tasks[task.taskId] = task
        return task

    def _indent(self, session_id: str, extra: int = 0) -> str:
        return "  " * (2 * self._depth_of(session_id) + 1 + extra)

    def _depth_of(self, session_id: str) -> int:
        if session_id in self._depth:
            return self._depth[session_id]
        parent = self.tree.session(session_id).parent_id
        return 0 if parent is None else self._depth_of(parent) + 1

    def _write(self, session_id: str, line: str, extra: int = 0) -> None:
        self.break_line()
        indent = self._indent(session_id, extra) if line else ""
        self._out.write(f"{indent}{line}\n")
        self._out.flush()
