"""A child's work as a commit on its branch (`commit_all`), and the record of what was copied into
its worktree from the parent (the `.worktreeinclude` copies, `worktree_env`), which is never
part of that work. Blocking: call from a worker thread."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from .git import commit_tree, git, output


def commit_all(worktree: str | os.PathLike[str], message: str) -> str | None:
    """Commit everything that changed in a child's worktree (whatever edited it: new, changed
    and deleted files; .gitignore'd ones stay out) on its branch, as coven-ls, and return the
    new commit; None when nothing changed since its HEAD (commits the child made itself are
    already on the branch). Runs no hooks and signs nothing: it must not wait or fail for the
    user's commit setup."""
    where = Path(worktree)
    what = f"Committing the child's work in {where}"
    # The project's environment copied in (`worktree_env`) is never the child's work, even when
    # the child un-ignores it: left out of `add`, and taken out of the index if it got there.
    known = copied_paths(where)
    copied = [f":(literal){p}" for p in known]
    add_work(where, known, what, hint="Check that its files are readable.")
    if copied:
        git(where, "rm", "-r", "--cached", "-q", "--ignore-unmatch", "--", *copied, what=what)
    tree = output(git(where, "write-tree", what=what))
    head = output(git(where, "rev-parse", "--verify", "HEAD^{commit}", what=what))
    if tree == output(git(where, "rev-parse", f"{head}^{{tree}}", what=what)):
        return None
    commit = commit_tree(where, tree, head, message)
    # Compare-and-swap on the old value: a commit the child makes at this very moment is not lost.
    git(where, "update-ref", "-m", "coven-ls: commit_all", "HEAD", commit, head, what=what)
    return commit


def add_work(
    where: Path,
    copied: Sequence[str],
    what: str,
    env: Mapping[str, str] | None = None,
    hint: str = "",
) -> None:
    """`git add -A` of everything in the worktree `where` but the `copied` paths (the parent's
    copies, never the child's work), into the index `env` names (default: its own)."""
    # Excluding an ignored path makes `git add` fail ("paths are ignored"): only those the
    # child un-ignored need it.
    ignored: set[str] = set()
    if copied:
        done = git(
            where,
            "check-ignore",
            "-z",
            "--stdin",
            input=b"".join(os.fsencode(p) + b"\0" for p in copied),
            ok=(0, 1),
            what=what,
        )
        ignored = {os.fsdecode(p) for p in done.stdout.split(b"\0") if p}
    excluded = [f":(exclude,literal){p}" for p in copied if p not in ignored]
    git(where, "add", "-A", "--", ".", *excluded, env=env, what=what, hint=hint)


COPIED_RECORD = "coven-copied"
"""in a worktree's own git folder: the paths copied into it from the parent (one a line)"""


def own_git_dir(worktree: Path) -> Path:
    found = output(git(worktree, "rev-parse", "--absolute-git-dir", what="Reading the worktree"))
    return Path(found)


def record_copied(
    worktree: str | os.PathLike[str], paths: Sequence[str], replace: bool = False
) -> None:
    """Remember the paths copied into a worktree (see `commit_all`), beside those remembered
    before (or, `replace`, instead of them)."""
    record = own_git_dir(Path(worktree)) / COPIED_RECORD
    known = [] if replace else copied_paths(worktree)
    text = "".join(f"{p}\n" for p in dict.fromkeys([*known, *paths]))
    scratch = record.with_name(record.name + ".tmp")
    scratch.write_text(text, encoding="utf-8")
    os.replace(scratch, record)


def copied_paths(worktree: str | os.PathLike[str]) -> list[str]:
    """The paths `record_copied` remembered for this worktree (none for a plain one)."""
    git_file = Path(worktree) / ".git"
    if not git_file.is_file():
        return []  # not a linked worktree: nothing was ever copied into it
    record = own_git_dir(Path(worktree)) / COPIED_RECORD
    try:
        return [ln for ln in record.read_text(encoding="utf-8").splitlines() if ln]
    except FileNotFoundError:
        return []
