"""The files of a parent's repository that a fenced worktree child must not write, though its
sandbox lets it write the git folder it shares with the parent (its commits go there): the
parent's HEAD, index, configuration and checked-out branch, and the lock files git writes them
through. The object store stays writable (the child's commits add objects to it); refs of other
branches too."""

from __future__ import annotations

import os
from pathlib import Path

from .git import git


def protected_git_files(repository: str) -> list[str]:
    """Absolute paths (existing files, and the `.lock` name of each: git writes a file by
    renaming its lock over it, so a lock it cannot create keeps the file as it is). Blocking."""
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
    paths: list[str] = []
    for file in files:
        real = Path(os.path.realpath(file))
        if real.is_file():
            paths.append(str(real))
        paths.append(str(real) + ".lock")
    return paths
