"""The three-way merge of a child's changes into the parent's working tree, as uncommitted edits:
the one operation of the workspace that writes the user's files (working-tree files and nothing
else: HEAD, branches, the index and the stash stay as they are). All or nothing: a conflict
anywhere writes nothing, and the child's branch keeps its work.

Choices, and why:

- Binary files and symbolic links are taken from the child only when the working tree still has
  the snapshot's version (or already has the child's); otherwise they are a conflict, as they
  cannot be merged line by line.
- Renames are detected (`changes`): a child's rename of a file the user edited meanwhile is
  merged, the user's edits moving to the new name.
- Executable bits are merged like a tiny file of their own: the side that changed it wins.
- Line endings and filters (`.gitattributes` text/eol/filter, `core.autocrlf`, Git LFS) are
  honoured: files are compared and merged in git's normalised form and written back as a
  checkout would write them (`working_tree`).
- A submodule's new commit is skipped, never applied (children's submodules are the parent's).

Plans first (`_plan`, reading only), then writes (`working_tree.apply_writes`), planning again
when the user saved a file in between. Blocking: call from a worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .changes import ChangeStatus, FileChange, changed_files
from .git import MODE_EXEC, MODE_GITLINK, MODE_LINK, GitError
from .repository import RepoInfo, read_blobs
from .working_tree import (
    MISSING,
    FinalFile,
    State,
    apply_writes,
    clean_bytes,
    core_config,
    disk_states,
    filtered_paths,
    merge_file,
    stat_of,
    to_worktree,
)

# Git's own test for a binary file (buffer_is_binary): a NUL in the first 8000 bytes.
_BINARY_PROBE = 8000

AppliedHow = Literal["child", "merged", "same"]


@dataclass(frozen=True)
class AppliedFile:
    """A change of the child that is now in the working tree."""

    path: str
    status: ChangeStatus
    old_path: str | None
    how: AppliedHow
    """"child": the working tree had the snapshot's version and now has the child's; "merged":
    the working tree had edits of its own, merged with the child's; "same": it already had the
    child's version"""
    lines_added: int
    lines_removed: int


@dataclass(frozen=True)
class Conflict:
    """A file whose working-tree version and child's version cannot both be kept."""

    path: str
    reason: str
    """a sentence fragment: "changed on the same lines in the working tree and by the child" """
    text: bytes | None = None
    """for a text conflict, the file with git's conflict markers (never written anywhere)"""


@dataclass(frozen=True)
class Skipped:
    """A change that is never applied (a submodule's commit), with why."""

    path: str
    reason: str


@dataclass(frozen=True)
class MergeResult:
    """A child's merge: all of it was applied (`conflicts` empty), or none of it."""

    applied: tuple[AppliedFile, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    skipped: tuple[Skipped, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.conflicts

    @property
    def lines_added(self) -> int:
        return sum(f.lines_added for f in self.applied)

    @property
    def lines_removed(self) -> int:
        return sum(f.lines_removed for f in self.applied)


@dataclass
class _Plan:
    writes: dict[str, FinalFile] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    applied: list[AppliedFile] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    seen: dict[str, tuple[int, int, int, int] | None] = field(default_factory=dict)


def merge_into_worktree(
    repo: RepoInfo, base: str, commit: str, *, label: str = "child", attempts: int = 3
) -> MergeResult:
    """Merge a child's changes (from `base`, the fork's snapshot, to `commit`, its commit or
    branch) into the user's working tree as it is now (with the user's own edits since the
    fork, and children merged before), as uncommitted changes. HEAD, branches, the index and the
    stash do not change. All or nothing: when any file conflicts, nothing is written and the
    result lists the conflicts (the child's branch keeps its work); else every change is written
    and listed. `label` names the child in conflict markers.

    Per file: a working file that still equals the snapshot takes the child's version; one that
    already equals the child's is left alone; text files both sides changed are merged three-way
    (`git merge-file`), overlapping edits being a conflict; anything else both changed (binary
    files, links, a change against a deletion) is a conflict."""
    found = changed_files(repo, base, commit)
    for _ in range(max(1, attempts)):
        plan = _plan(repo, found, label)
        if plan.conflicts:
            return MergeResult(conflicts=tuple(plan.conflicts), skipped=tuple(plan.skipped))
        # The user (or their editor) may have saved a file since it was read: plan again rather
        # than overwrite that save.
        if all(stat_of(repo.toplevel / p) == s for p, s in plan.seen.items()):
            apply_writes(repo.toplevel, plan.deletes, plan.writes)
            return MergeResult(applied=tuple(plan.applied), skipped=tuple(plan.skipped))
    raise GitError(
        f"Could not merge {commit}: files in the working tree kept changing while it was merged. "
        "Try again when they are saved."
    )


def _plan(repo: RepoInfo, found: Sequence[FileChange], label: str) -> _Plan:
    """Everything the merge of `found` would write, or its conflicts; reads, writes nothing in
    the working tree."""
    top = repo.toplevel
    plan = _Plan()
    config = core_config(top)
    filemode = config.get("core.filemode", "true") != "false"

    # The snapshot's and the child's state of every path they touch; a path both deleted and
    # added (a rename's source re-created) has both sides.
    base_of: dict[str, State] = {}
    child_of: dict[str, State] = {}
    links: list[str] = []
    relevant: list[FileChange] = []
    for ch in found:
        if ch.submodule:
            plan.skipped.append(
                Skipped(
                    ch.path,
                    "a submodule: children do not get submodules checked out, so a change of "
                    "its commit is not applied",
                )
            )
            continue
        relevant.append(ch)
        if ch.old_path is not None and ch.old_mode and ch.old_blob:
            base_of[ch.old_path] = _tree_state(ch.old_mode, ch.old_blob)
            links += [ch.old_blob] if ch.old_mode == MODE_LINK else []
        if ch.status != "deleted" and ch.new_mode and ch.new_blob:
            child_of[ch.path] = _tree_state(ch.new_mode, ch.new_blob)
            links += [ch.new_blob] if ch.new_mode == MODE_LINK else []
    targets = read_blobs(top, links)
    for states in (base_of, child_of):
        for p, s in states.items():
            if s.kind == "link" and s.oid:
                states[p] = State("link", target=targets[s.oid])

    paths = sorted(set(base_of) | set(child_of))
    for p in paths:
        _safe_path(p)
    now = disk_states(top, paths, plan.seen)
    filtered = filtered_paths(top, paths, config)

    # A path's final state, when it changes: None for "delete".
    final: dict[str, State | None] = {}
    merged_text: dict[str, bytes] = {}  # clean bytes of three-way merged files
    how: dict[str, AppliedHow] = {}

    def same(a: State, b: State) -> bool:
        if a.kind != b.kind:
            return False
        if a.kind == "file":
            return a.oid == b.oid and (a.executable == b.executable or not filemode)
        if a.kind == "link":
            return a.target == b.target
        return a.kind == "missing"

    def conflict(path: str, reason: str, text: bytes | None = None) -> None:
        plan.conflicts.append(Conflict(path, reason, text))

    def three_way(ch: FileChange, ours_at: str, base: State, child: State) -> None:
        """Merge the working file at `ours_at` with the child's change base -> child, into
        ch.path."""
        ours = now[ours_at]
        if not (ours.kind == base.kind == child.kind == "file"):
            conflict(ch.path, _type_clash(ours, base, child))
            return
        mine = clean_bytes(top, ours_at, ours_at in filtered)
        executable = child.executable if ours.executable == base.executable else ours.executable
        executable = executable if filemode else child.executable
        if base.oid == child.oid:  # the child changed only the executable bit
            final[ch.path] = State("file", executable)
            merged_text[ch.path] = mine
            how[ch.path] = "merged"
            return
        assert base.oid and child.oid
        blobs = read_blobs(top, [base.oid, child.oid])
        texts = (mine, blobs[base.oid], blobs[child.oid])
        if ch.binary or any(b"\0" in t[:_BINARY_PROBE] for t in texts):
            conflict(ch.path, "a binary file changed both in the working tree and by the child")
            return
        text, clashes = merge_file(top, texts, label)
        if clashes:
            conflict(
                ch.path, "changed on the same lines in the working tree and by the child", text
            )
            return
        final[ch.path] = State("file", executable)
        merged_text[ch.path] = text
        how[ch.path] = "merged"

    handled: set[str] = set()
    for ch in relevant:
        # A rename whose source path the child fills again is left to the per-path rules.
        if ch.status != "renamed" or ch.old_path is None or ch.old_path in child_of:
            continue
        old, new = ch.old_path, ch.path
        mine, base, child = now[old], base_of[old], child_of[new]
        if not same(now[new], base_of.get(new, MISSING)) and not same(now[new], child):
            continue  # the destination was changed in the working tree: decided per path below
        handled.update((old, new))
        if same(mine, base):  # the plain case: the rename (and its edits) as the child made it
            final[new], how[new], final[old] = child, "child", None
        elif mine.kind == "missing":
            if same(now[new], child):
                how[new] = "same"
            else:
                conflict(old, f"deleted in the working tree but renamed to {new} by the child")
        else:  # the user edited the file the child renamed: their edits move along
            three_way(ch, old, base, child)
            final[old] = None

    for p in paths:
        if p in handled:
            continue
        mine, base, child = now[p], base_of.get(p, MISSING), child_of.get(p, MISSING)
        if mine.kind == "dir" and base.kind == "missing" and _emptied(top, p, base_of, child_of):
            mine = MISSING  # a folder whose every file the child deletes, for a file of this name
        if same(mine, base):
            final[p], how[p] = (None if child.kind == "missing" else child), "child"
        elif same(mine, child):
            how[p] = "same"
        elif mine.kind == "missing":
            conflict(p, "deleted in the working tree but changed by the child")
        elif child.kind == "missing":
            conflict(p, "changed in the working tree but deleted by the child")
        elif base.kind == "missing":
            what = "a folder" if mine.kind == "dir" else "a different file"
            conflict(p, f"created by the child, but the working tree has {what} there")
        else:
            ch = next(c for c in relevant if c.path == p)
            three_way(ch, p, base, child)

    # Writing through a link, or into what is now a file, would put the child's file elsewhere
    # (unless the merge deletes that file first).
    written = [p for p, state in final.items() if state is not None]
    folders = sorted({parent for p in written for parent in _parents(p)} - set(now))
    now.update(disk_states(top, folders, plan.seen))
    for p in written:
        for parent in _parents(p):
            if (
                now[parent].kind not in ("dir", "missing")
                and final.get(parent, MISSING) is not None
            ):
                conflict(p, f"the working tree has a file or a symbolic link at {parent}")
                break
    if plan.conflicts:
        return plan

    # Contents as they go on disk: child blobs and merge results through the checkout filters.
    need = [s.oid for p, s in final.items() if s and s.kind == "file" and p not in merged_text]
    blobs = read_blobs(top, [o for o in need if o])
    for p, state in final.items():
        if state is None:
            plan.deletes.append(p)
        elif state.kind == "link":
            assert state.target is not None
            plan.writes[p] = FinalFile("link", state.target)
        else:
            if p in merged_text:
                data = to_worktree(top, p, None, merged_text[p], p in filtered)
            else:
                assert state.oid
                data = to_worktree(top, p, state.oid, blobs[state.oid], p in filtered)
            plan.writes[p] = FinalFile("file", data, state.executable)

    for ch in relevant:
        decided = how.get(ch.path) or how.get(ch.old_path or "")
        plan.applied.append(
            AppliedFile(
                path=ch.path,
                status=ch.status,
                old_path=ch.old_path,
                how=decided or "child",
                lines_added=ch.lines_added,
                lines_removed=ch.lines_removed,
            )
        )
    return plan


def _tree_state(mode: str, oid: str) -> State:
    if mode == MODE_LINK:
        return State("link", oid=oid)  # its target is read in the same batch as the others
    if mode == MODE_GITLINK:
        return State("submodule", oid=oid)
    return State("file", executable=mode == MODE_EXEC, oid=oid)


def _type_clash(ours: State, base: State, child: State) -> str:
    kinds = {"file": "a file", "link": "a symbolic link", "dir": "a folder", "other": "not a file"}
    if "link" in (ours.kind, base.kind, child.kind):
        return (
            "changed both in the working tree and by the child, and a symbolic link cannot be "
            "merged"
        )
    return f"changed both in the working tree and by the child (it is {kinds.get(ours.kind, '?')})"


def _safe_path(path: str) -> None:
    """Git never stores such paths; a damaged or hostile commit could."""
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
        raise GitError(f"The child's commit has a path git should not allow: {path!r}.")


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _emptied(
    top: Path, folder: str, base_of: Mapping[str, State], child_of: Mapping[str, State]
) -> bool:
    """Whether every file in the working tree's `folder` is one the child deletes unchanged, so
    that the folder goes away and a file can take its name."""
    for dirpath, dirnames, filenames in os.walk(top / folder):
        if not dirnames and not filenames:
            return False  # an empty folder would stay
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in filenames + links:
            rel = (Path(dirpath) / name).relative_to(top).as_posix()
            if rel not in base_of or rel in child_of:
                return False
    return True
