"""The repository a parent works in, as the workspace sees it: whether children forked there can
get worktrees (`inspect`), and reading it (commits, files in a commit, the children's `coven/`
branches). Blocking: call from a worker thread."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .git import (
    MIN_GIT_VERSION,
    GitError,
    failure,
    git,
    git_version,
    output,
    revision,
    version_text,
)
from .submodules import submodule_paths

# Branches of children live under this prefix (`coven/<fork-id>/<n>-<slug>`), which is how
# `list_coven_worktrees` tells them from the user's own worktrees.
COVEN_BRANCH_PREFIX = "coven/"


@dataclass(frozen=True)
class RepoInfo:
    """A git work tree with at least one commit: where children can get worktrees."""

    toplevel: Path
    """the top folder of the work tree (a linked worktree's own top, if cwd is in one)"""
    git_dir: Path
    """this work tree's git folder (`.git`, or `.git/worktrees/<name>` for a linked worktree)"""
    common_dir: Path
    """the repository's shared git folder (objects, refs, worktrees)"""
    head: str
    """the commit HEAD pointed at when inspected"""
    branch: str | None
    """the checked-out branch's short name; None when HEAD is detached"""
    submodules: tuple[str, ...]
    """submodule paths (relative, `/`-separated): checked out in children as the parent has them"""
    git_version: tuple[int, int, int]


@dataclass(frozen=True)
class NotARepo:
    """Why cwd cannot give children worktrees: they then share the parent's folder."""

    cwd: Path
    reason: str
    """a short phrase: "not a git repository", "the repository has no commits yet", ..."""


def inspect(cwd: str | os.PathLike[str]) -> RepoInfo | NotARepo:
    """Whether children forked in `cwd` can get worktrees: a RepoInfo when cwd is inside a git
    work tree with at least one commit (a detached HEAD is fine), else a NotARepo that says why
    they must share the parent's folder. Raises GitError only for a git that fails in a way that
    says nothing about the folder."""
    where = Path(cwd)
    executable = shutil.which("git")
    if executable is None:
        return NotARepo(where, "git is not installed")
    version = git_version(executable)
    if version is None:
        return NotARepo(where, f"{executable} does not report a git version")
    if version < MIN_GIT_VERSION:
        return NotARepo(
            where,
            f"git {version_text(version)} is too old (need ≥ {version_text(MIN_GIT_VERSION)})",
        )
    if not where.is_dir():
        return NotARepo(where, "the folder does not exist")

    done = git(where, "rev-parse", "--is-inside-work-tree", ok=(0, 128))
    if done.returncode:
        stderr = done.stderr.decode(errors="replace")
        if "not a git repository" in stderr:
            return NotARepo(where, "not a git repository")
        if "dubious ownership" in stderr:
            return NotARepo(where, "git refuses the repository: it belongs to another user")
        return NotARepo(where, failure("git rev-parse", 128, stderr, "").removesuffix("."))
    if output(done) != "true":
        return NotARepo(where, "inside a git folder or a bare repository, not a work tree")

    top, git_dir, common = output(
        git(where, "rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir")
    ).splitlines()
    toplevel = Path(top)
    head = git(toplevel, "rev-parse", "-q", "--verify", "HEAD^{commit}", ok=(0, 1))
    if head.returncode:
        return NotARepo(where, "the repository has no commits yet")
    branch = git(toplevel, "symbolic-ref", "-q", "--short", "HEAD", ok=(0, 1))
    return RepoInfo(
        toplevel=toplevel,
        git_dir=Path(git_dir),
        common_dir=(where / common).resolve(),  # relative to where rev-parse ran
        head=output(head),
        branch=output(branch) or None,
        submodules=submodule_paths(toplevel),
        git_version=version,
    )


def resolve(repo: RepoInfo, rev: str) -> str:
    """The commit a revision (a branch, say) names."""
    return output(
        git(
            repo.toplevel,
            "rev-parse",
            "--verify",
            f"{revision(rev)}^{{commit}}",
            what=f"Reading {rev}",
        )
    )


def show(repo: RepoInfo, rev: str, path: str) -> bytes | None:
    """The content of `path` (relative to the top, `/`-separated) in `rev`, as git stores it (a
    link's target, for a symbolic link); None when `rev` has no file there."""
    query = f"{revision(rev)}:{path}".encode(errors="surrogateescape")
    if b"\n" in query:
        return None
    out = git(repo.toplevel, "cat-file", "--batch", input=query + b"\n").stdout
    header, _, rest = out.partition(b"\n")
    parts = header.split(b" ")
    if len(parts) != 3 or parts[1] != b"blob":
        return None  # "<query> missing", or a tree or a submodule's commit
    return rest[: int(parts[2])]


def read_blobs(top: Path, oids: Iterable[str]) -> dict[str, bytes]:
    """Blob contents, as stored (no filters), in one `git cat-file --batch`."""
    wanted = list(dict.fromkeys(oids))
    if not wanted:
        return {}
    out = git(top, "cat-file", "--batch", input="".join(f"{o}\n" for o in wanted).encode()).stdout
    blobs: dict[str, bytes] = {}
    at = 0
    for oid in wanted:
        end = out.index(b"\n", at)
        parts = out[at:end].split(b" ")
        if len(parts) != 3:
            raise GitError(f"Git has no object {oid}: the repository may be damaged.")
        size = int(parts[2])
        blobs[oid] = out[end + 1 : end + 1 + size]
        at = end + 1 + size + 1
    return blobs


def delete_branch(repo: RepoInfo, branch: str) -> None:
    """Delete one of coven-ls's branches (a branch already gone is fine)."""
    ref = f"refs/heads/{branch}"
    if not git(repo.toplevel, "rev-parse", "-q", "--verify", ref, ok=(0, 1)).returncode:
        git(
            repo.toplevel,
            "branch",
            "-D",
            "--",
            branch,
            what=f"Deleting the branch {branch}",
            hint="A branch checked out in some worktree cannot be deleted.",
        )


def same_tree(repo: RepoInfo, a: str, b: str) -> bool:
    """Whether two commits hold exactly the same files."""
    trees = git(
        repo.toplevel,
        "rev-parse",
        f"{revision(a)}^{{tree}}",
        f"{revision(b)}^{{tree}}",
        what="Reading trees",
    )
    first, second = output(trees).splitlines()
    return first == second


def branches(repo: RepoInfo, prefix: str = COVEN_BRANCH_PREFIX) -> dict[str, str]:
    """The repository's branches under `prefix`, each with the commit it points at."""
    out = git(
        repo.toplevel,
        "for-each-ref",
        "--format=%(refname:short)%00%(objectname)",
        f"refs/heads/{prefix.rstrip('/')}/",
    )
    found: dict[str, str] = {}
    for line in output(out).splitlines():
        name, _, commit = line.partition("\0")
        if name.startswith(prefix):
            found[name] = commit
    return found


def branch_start(repo: RepoInfo, branch: str) -> str | None:
    """The commit a branch was created at, from its reflog (None when it has none: reflogs off,
    or expired): for a child's branch, the fork's snapshot."""
    done = git(
        repo.toplevel,
        "reflog",
        "show",
        "--format=%H",
        f"refs/heads/{branch}",
        "--",
        ok=(0, 128),
    )
    lines = output(done).splitlines() if not done.returncode else []
    return lines[-1] if lines else None
