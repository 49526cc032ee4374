"""A fork's snapshot: one commit of exactly what the parent sees in its working tree, which every
child of the fork starts from, made without touching the user's index, HEAD, branches or stash.
Blocking: call from a worker thread."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from .git import commit_tree, git, output, private_index_options
from .repository import RepoInfo


def snapshot(repo: RepoInfo) -> str:
    """A commit of exactly what the parent sees in its working tree, for children to start from:
    HEAD plus staged and unstaged changes (deletions and renames included) plus untracked files
    that .gitignore does not exclude, with executable bits, symbolic links and binary files.
    The user's index, HEAD, branches and stash are untouched: the commit is built in a temporary
    index and pointed at by nothing. A clean working tree gives HEAD itself."""
    top = repo.toplevel
    head = output(git(top, "rev-parse", "--verify", "HEAD^{commit}", what="Reading HEAD"))
    hint = (
        "Check that every file in the working tree is readable, or add the unreadable ones to "
        ".gitignore."
    )
    with tempfile.TemporaryDirectory(prefix="coven-snapshot-") as scratch:
        index = Path(scratch) / "index"
        env = {"GIT_INDEX_FILE": str(index)}
        # The temporary index starts as a copy of the user's (only read, never written) rather
        # than as `git read-tree HEAD`: its stat cache lets `git add -A` skip unchanged files
        # instead of hashing every file of the tree, and it keeps files the user force-added
        # despite .gitignore. copy2 keeps the file's mtime, which git's "racily clean" check
        # compares entries against. Without a user index (it can be deleted), read-tree it is.
        # Sparse checkouts are turned off for these commands, as are the skip-worktree bits
        # below: a file outside the sparse cone, which the parent does not see, is then absent
        # from the snapshot like any other missing file.
        # The temporary index is read by this git only, never by another tool: it may skip its
        # checksum (`private_index_options`).
        plain = (
            "-c",
            "core.splitIndex=false",
            "-c",
            "core.sparseCheckout=false",
            *private_index_options(repo.git_version),
        )
        user_index = repo.git_dir / "index"
        if user_index.is_file():
            shutil.copy2(user_index, index)
            _clear_hiding_flags(top, env, plain)
        else:
            git(top, *plain, "read-tree", "HEAD", env=env, what="Snapshotting the working tree")
        git(top, *plain, "add", "-A", env=env, what="Snapshotting the working tree", hint=hint)
        tree = output(git(top, *plain, "write-tree", env=env, what="Snapshotting the working tree"))
    if tree == output(git(top, "rev-parse", f"{head}^{{tree}}")):
        return head
    return commit_tree(top, tree, head, "coven-ls: snapshot of the working tree for a fork")


def _clear_hiding_flags(top: Path, env: Mapping[str, str], plain: Sequence[str]) -> None:
    """In the temporary index, clear the assume-unchanged and skip-worktree bits: they make
    `git add` look away from a file's working-tree state, and the snapshot is that state. (One
    update-index command per flag: it applies only one of them per run.)"""
    listing = git(top, *plain, "ls-files", "-v", "-z", env=env).stdout
    assumed: list[bytes] = []
    skipped: list[bytes] = []
    for record in listing.split(b"\0"):
        if len(record) < 3:
            continue
        tag, path = record[:1], record[2:]
        if tag.islower():
            assumed.append(path)
        if tag.upper() == b"S":
            skipped.append(path)
    for flag, paths in (("--no-assume-unchanged", assumed), ("--no-skip-worktree", skipped)):
        if paths:
            git(
                top,
                *plain,
                "update-index",
                flag,
                "-z",
                "--stdin",
                input=b"\0".join(paths) + b"\0",
                env=env,
                what="Snapshotting the working tree",
            )
