"""The files of a parent's repository that a fenced worktree child must not write, though its
sandbox lets it write the git folder it shares with the parent (its commits go there): the
parent's HEAD, index, configuration and checked-out branch. The object store stays writable
(the child's commits add objects to it); refs of other branches too."""

from __future__ import annotations

import os
from pathlib import Path

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
