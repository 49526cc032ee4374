"""The server's side of what travels: what a child starts from here (its worktree's HEAD and
branch, the repository it belongs to, its `.worktreeinclude` files with their digests), and the
work a node sends back after each turn, taken into the child's worktree here so that it looks
as if the child had worked in it: its branch at the node's HEAD, the node's uncommitted changes
uncommitted here. Blocking (git, files): call from a worker thread."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
from pathlib import Path

from ...core.workspace.commits import copied_paths
from ...core.workspace.git import git, output, revision
from ...core.workspace.worktree_env import included
from . import bundles
from .items import IncludedFile, Work


def head_of(worktree: str) -> tuple[str, str | None]:
    """The worktree's HEAD commit and its branch (None: detached)."""
    head = output(git(worktree, "rev-parse", "--verify", "HEAD^{commit}", what="Reading HEAD"))
    branch = output(git(worktree, "symbolic-ref", "-q", "--short", "HEAD", ok=(0, 1)))
    return head, branch or None


def origin_of(worktree: str) -> str:
    """Which repository the worktree belongs to, for the node's cache: this machine and the
    repository's common git folder."""
    common = output(
        git(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir", what="Reading")
    )
    return f"{socket.gethostname()}:{os.path.realpath(common)}"


def included_files(worktree: str) -> tuple[list[IncludedFile], dict[str, Path]]:
    """The `.worktreeinclude` files in the worktree (the gitignored files its include names;
    folders walked), and where each digest's contents are."""
    top = Path(worktree)
    entries = included(top)
    files: list[IncludedFile] = []
    where: dict[str, Path] = {}

    def add(path: Path) -> None:
        relative = str(path.relative_to(top))
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            files.append(IncludedFile(relative, None, link=os.readlink(path)))
        elif stat.S_ISREG(info.st_mode):
            digest = _digest(path)
            files.append(IncludedFile(relative, digest, stat.S_IMODE(info.st_mode)))
            where[digest] = path

    for entry in entries:
        path = top / entry.rstrip("/")
        if path.is_dir() and not path.is_symlink():
            for folder, _dirs, names in os.walk(path):
                for name in sorted(names):
                    add(Path(folder) / name)
        elif os.path.lexists(path):
            add(path)
    return files, where


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def start_bundle(worktree: str, head: str, have: list[str]) -> bytes | None:
    return bundles.make_bundle(worktree, {"head": head}, have)


def apply_work(worktree: str, work: Work) -> None:
    """Make the child's worktree here what the node's is: its commits fetched, its branch (HEAD)
    at the node's HEAD, the node's uncommitted changes as uncommitted files (the index at HEAD).
    The `.worktreeinclude` copies and other ignored files here are left alone."""
    what = f"Bringing the child's work into {worktree}"
    if work.bundle is not None:
        bundles.take_bundle(worktree, work.bundle)
    git(worktree, "reset", "--quiet", "--hard", revision(work.head), what=what)
    kept = [f":(exclude,literal){p}" for p in copied_paths(worktree)]
    git(worktree, "clean", "-fdq", "--", ".", *kept, what=what)
    if work.state is not None:
        git(worktree, "read-tree", "-m", "-u", "HEAD", revision(work.state), what=what)
        git(worktree, "reset", "--quiet", what=what)
