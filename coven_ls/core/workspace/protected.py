"""The files of a parent's repository that a fenced worktree child must not write, though its
sandbox lets it write the git folder it shares with the parent (its commits go there): the
parent's HEAD, index, configuration and checked-out branch (`protected_git_files`, as the
sandbox's `denyWrite`); and, narrower, the whole shared git folder but the object store and the
child's own branch ref and reflog (`git_fence`, which Claude's fence applies to each command's
bubblewrap mounts). The object store's loose objects stay writable: the child's commits add
objects there (and so it could remove one); its packs are read-only."""

from __future__ import annotations

import os
from pathlib import Path

from ..agent import GitFence
from .git import git


def protected_git_files(repository: str) -> list[str]:
    """Absolute paths of those that exist. Each is mounted read-only over itself, so git cannot
    rename its lock over it either (a mount point is busy). Not their `.lock` names: a sandbox
    makes a missing path it mounts over exist in the host's folder while its command runs, and
    a `main.lock` there would stop the user's own git (and other children's sandboxes) for that
    long. Blocking."""
    done = git(
        repository,
        "rev-parse",
        "--absolute-git-dir",
        "--git-common-dir",
        what="git rev-parse (the parent's git folder)",
    )
    own, common = done.stdout.decode().splitlines()[:2]
    common_dir = Path(common if os.path.isabs(common) else os.path.join(repository, common))
    own_dir = Path(own)
    files = [own_dir / "HEAD", own_dir / "index", common_dir / "config", common_dir / "packed-refs"]
    branch = git(repository, "symbolic-ref", "-q", "HEAD", ok=(0, 1)).stdout.decode().strip()
    if branch.startswith("refs/"):
        files.append(common_dir / branch)
    real = (Path(os.path.realpath(file)) for file in files)
    return [str(path) for path in real if path.is_file()]


def git_fence(worktree: str) -> GitFence:
    """What a child's commands may write of the git folder its worktree shares with the parent:
    the object store's loose objects, its own worktree's folder (the sandbox keeps that one
    writable itself), and its branch's ref and reflog (none on a detached HEAD), whose folders
    stay writable (git renames `<ref>.lock` over the ref) with every other entry there
    read-only. Blocking."""
    done = git(
        worktree,
        "rev-parse",
        "--git-common-dir",
        "--symbolic-full-name",
        "HEAD",
        what="git rev-parse (the child's git folder and branch)",
    )
    common, ref = [*done.stdout.decode().splitlines(), "", ""][:2]
    common_dir = Path(os.path.realpath(os.path.join(worktree, common)))
    own = [common_dir / ref, common_dir / "logs" / ref] if ref.startswith("refs/heads/") else []
    writable = [common_dir / "objects", *(path.parent for path in own if path.parent.is_dir())]
    return GitFence(
        common=str(common_dir),
        writable=tuple(str(path) for path in writable),
        # A commit writes loose objects; packs (most of the history) and `info` (alternates,
        # commit graphs) only gc, repack and fetch do.
        readonly=tuple(str(common_dir / "objects" / name) for name in ("pack", "info")),
        own=tuple(str(path) for path in own),
    )
