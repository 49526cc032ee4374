"""The empty mount points Claude Code's sandbox leaves in the repository a fenced worktree child
shares with its parent: it write-protects a git folder's `config.worktree`, `remotes/`, ... by
mounting over them, and makes each one missing (an empty file or folder) in the real folder
first, where it stays after the command. Recorded when a repository's first fenced fork
starts (`watch`) and removed when its last one's children have ended (`release`): only the
names below, only those that were not there before, and only while still empty (a file of no
bytes, a folder holding nothing but such stubs). Blocking: call from a worker thread."""

from __future__ import annotations

import logging
import os
import stat
import threading
from dataclasses import dataclass, field

from .git import git

log = logging.getLogger(__name__)

# In the shared git folder; a folder after what it may hold, so that it is empty by its turn.
GIT_STUBS = (
    "objects/info/commit-graphs/.claude-sandbox-noreplace",
    "objects/info/commit-graphs",
    "objects/info/.claude-sandbox-noreplace",
    "objects/info/alternates",
    "info/.claude-sandbox-noreplace",
    "config.worktree",
    "NOTES_MERGE_WORKTREE",
    "remotes",
    "glab-cli",
    "branches",
)
# In the parent's checkout.
CHECKOUT_STUBS = (".claude/.cc-writes", ".claude")


@dataclass
class _Watched:
    forks: int = 0
    paths: list[str] = field(default_factory=list)
    before: frozenset[str] = field(default_factory=frozenset)


_lock = threading.Lock()
_watched: dict[str, _Watched] = {}


def candidates(repository: str) -> list[str]:
    """The absolute paths a sandbox may leave behind for a repository (its top folder)."""
    done = git(repository, "rev-parse", "--git-common-dir", what="git rev-parse (the git folder)")
    common = os.path.realpath(os.path.join(repository, done.stdout.decode().strip()))
    top = os.path.realpath(repository)
    return [os.path.join(common, name) for name in GIT_STUBS] + [
        os.path.join(top, name) for name in CHECKOUT_STUBS
    ]


def present(paths: list[str]) -> frozenset[str]:
    return frozenset(path for path in paths if os.path.lexists(path))


def watch(repository: str) -> None:
    """A fenced fork of `repository` starts: the first of those running records which of the
    stubs' names exist already."""
    paths = candidates(repository)
    with _lock:
        watched = _watched.setdefault(repository, _Watched())
        if watched.forks == 0:
            watched.paths, watched.before = paths, present(paths)
        watched.forks += 1


def release(repository: str) -> list[str]:
    """A fenced fork of `repository` has ended: when it was the last one running, remove the
    stubs that were not there when the first started and are empty; the paths removed."""
    with _lock:
        watched = _watched.get(repository)
        if watched is None:
            return []
        watched.forks -= 1
        if watched.forks > 0:
            return []
        del _watched[repository]
    return remove_new(watched.paths, watched.before)


def remove_new(paths: list[str], before: frozenset[str]) -> list[str]:
    """Remove each of `paths` (in order) not in `before` that is an empty file or folder."""
    removed = []
    for path in paths:
        if path in before:
            continue
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode) and os.lstat(path).st_size == 0:
                os.unlink(path)
            elif stat.S_ISDIR(mode) and not os.listdir(path):
                os.rmdir(path)
            else:
                continue  # missing, not empty, or something else (a link): not a stub
        except FileNotFoundError:
            continue
        except OSError as exc:  # another sandbox's mount point meanwhile, say: left as it is
            log.info("sandbox stub %s left: %s", path, exc)
            continue
        removed.append(path)
    return removed
