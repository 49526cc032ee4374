"""What a child changed: the files that differ between the fork's snapshot and the child's commit,
renames detected (`-M`, git's default 50% similarity), with their modes, blobs and line counts.
Blocking: call from a worker thread."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from .git import MODE_GITLINK, git, revision
from .repository import RepoInfo

ChangeStatus = Literal["added", "modified", "deleted", "renamed"]


@dataclass(frozen=True)
class FileChange:
    """One file a child changed, between the fork's snapshot and the child's commit."""

    path: str
    """the path in the child's commit (for a deletion, the deleted path); relative, `/`"""
    status: ChangeStatus
    old_path: str | None
    """the path in the snapshot: the rename's source, else equal to `path`; None when added"""
    binary: bool
    lines_added: int
    """0 for binary files"""
    lines_removed: int
    old_mode: str | None
    """git's mode in the snapshot ("100644", "100755", "120000" link, "160000" submodule)"""
    new_mode: str | None
    old_blob: str | None
    new_blob: str | None
    similarity: int | None = None
    """for renames: git's similarity index, 0-100"""

    @property
    def submodule(self) -> bool:
        return MODE_GITLINK in (self.old_mode, self.new_mode)


def changed_files(repo: RepoInfo, base: str, commit: str) -> list[FileChange]:
    """The files that differ between `base` (a fork's snapshot) and `commit` (a child's commit or
    branch), renames detected, with +/- line counts; in git's path order."""
    top = repo.toplevel
    what = f"Comparing {base} with {commit}"
    spec = ("diff-tree", "-r", "-z", "-M", "--no-abbrev", "--no-ext-diff")
    raw = git(top, *spec, "--raw", revision(base), revision(commit), "--", what=what).stdout
    counts = git(top, *spec, "--numstat", revision(base), revision(commit), "--", what=what).stdout

    numstat: dict[tuple[str, str], tuple[int | None, int | None]] = {}
    fields = counts.split(b"\0")
    i = 0
    while i < len(fields) - 1:
        added, removed, path = fields[i].split(b"\t", 2)
        if path:  # "+\t-\tpath"
            old = new = os.fsdecode(path)
            i += 1
        else:  # a rename: "+\t-\t", source, destination
            old, new = os.fsdecode(fields[i + 1]), os.fsdecode(fields[i + 2])
            i += 3
        numstat[(old, new)] = (
            None if added == b"-" else int(added),
            None if removed == b"-" else int(removed),
        )

    found: list[FileChange] = []
    fields = raw.split(b"\0")
    i = 0
    while i < len(fields) - 1:
        old_mode, new_mode, old_blob, new_blob, letter = fields[i][1:].decode().split(" ")
        if letter[0] in "RC":
            old, new = os.fsdecode(fields[i + 1]), os.fsdecode(fields[i + 2])
            i += 3
        else:
            old = new = os.fsdecode(fields[i + 1])
            i += 2
        kind = letter[0]
        plus, minus = numstat.get((old, new), (0, 0))
        status: ChangeStatus = (
            "added"
            if kind == "A"
            else "deleted"
            if kind == "D"
            else "renamed"
            if kind == "R"
            else "modified"  # M, and T (a type change: file <-> link)
        )
        if kind == "C":  # only with -C, which is not asked for: a copy is an addition
            status, kind = "added", "A"
        found.append(
            FileChange(
                path=new,
                status=status,
                old_path=None if kind == "A" else old,
                binary=plus is None,
                lines_added=plus or 0,
                lines_removed=minus or 0,
                old_mode=None if kind == "A" else old_mode,
                new_mode=None if kind == "D" else new_mode,
                old_blob=None if kind == "A" else old_blob,
                new_blob=None if kind == "D" else new_blob,
                similarity=int(letter[1:]) if kind == "R" and letter[1:] else None,
            )
        )
    return found
