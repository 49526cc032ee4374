"""Submodules in a child's worktree, which come from the parent's. Each submodule the parent has
checked out is checked out in the child's worktree at the snapshot's commit, as a linked worktree
(detached) of the parent's own submodule repository: no clone, no network, no change to any
configuration, its objects shared (`checkout_submodules`). One the parent has not initialised
stays an empty folder, as in the parent. A change a child makes to a submodule pointer is
reported as skipped by the merge, never applied. Blocking: call from a worker thread."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .git import MODE_GITLINK, GitError, git, output, revision

log = logging.getLogger(__name__)


def submodule_paths(toplevel: Path) -> tuple[str, ...]:
    """The paths the index records as submodules (gitlinks), whether or not .gitmodules names
    them and whether or not they are initialised."""
    listing = git(toplevel, "ls-files", "--stage", "-z").stdout
    found = []
    for record in listing.split(b"\0"):
        info, _, path = record.partition(b"\t")
        if info.startswith(MODE_GITLINK.encode() + b" "):
            found.append(os.fsdecode(path))
    return tuple(dict.fromkeys(found))  # a conflicted submodule has several stages


def checkout_submodules(source: Path, worktree: Path, commit: str) -> list[str]:
    """Check out in `worktree` (a new worktree at `commit`) every submodule that the work tree
    `source` has checked out, at the commit `commit` records for it, as a detached linked
    worktree of `source`'s submodule repository (nested submodules too). Returns the paths
    checked out. A submodule whose recorded commit its repository lacks (the pointer was moved
    past what was fetched) stays an empty folder, and is logged: a child is better off without
    it than without a worktree."""
    found: list[str] = []
    for sub in submodule_paths(source):
        origin = source / sub
        if not (origin / ".git").exists():
            continue  # not initialised in the parent: empty there, so empty here
        entry = output(git(worktree, "ls-tree", "-z", revision(commit), "--", sub)).rstrip("\0")
        info, _, _name = entry.partition("\t")
        fields = info.split()
        if len(fields) != 3 or fields[0] != MODE_GITLINK:
            continue
        target = worktree / sub
        try:
            git(
                origin,
                "worktree",
                "add",
                "--quiet",
                "--detach",
                str(target),
                revision(fields[2]),
                what=f"Checking out the submodule {sub} in {worktree}",
            )
        except GitError as exc:
            log.warning("%s", exc.message)
            continue
        found.append(sub)
        found.extend(f"{sub}/{p}" for p in checkout_submodules(origin, target, fields[2]))
    return found


def remove_submodule_worktrees(worktree: Path) -> None:
    """Unregister the submodule worktrees `checkout_submodules` made in a child's worktree (from
    the parent's submodule repositories), innermost first, so that none stays registered."""
    if not (worktree / ".git").is_file():
        return
    try:
        subs = submodule_paths(worktree)
    except GitError:
        return  # not a usable work tree any more: `git worktree prune` forgets its leftovers
    for sub in subs:
        target = worktree / sub
        if not (target / ".git").is_file():
            continue
        remove_submodule_worktrees(target)
        try:
            git(target, "worktree", "remove", "--force", str(target))
        except GitError as exc:
            log.warning("%s", exc.message)
