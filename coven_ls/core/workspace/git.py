"""Running git: the one way the workspace calls the `git` command line, and the git it needs.

Plain functions over subprocess, blocking: call them from a worker thread. Every command runs
with the user's hooks off, no prompt, the C locale and none of the variables that would point it
at another repository (coven-ls may itself run under a git hook); one that fails raises
`GitError`, whose message says what failed, git's own reason and what to do.

Minimum git version: 2.25 (`MIN_GIT_VERSION`), for these:
- 2.25: `git worktree add` no longer resets submodules recursively when `submodule.recurse` is
  set (it could fail, or touch the user's submodules);
- 2.22: `git worktree add` picks its administrative folder name atomically, so that children
  created in parallel do not collide;
- 2.21: `git worktree remove` works when a worktree has (uninitialised) submodules, which every
  child of a repository with submodules has;
- 2.17: `git worktree remove`, also for a worktree whose folder was deleted by hand;
- 2.15: `GIT_OPTIONAL_LOCKS=0`, which keeps read-only commands from rewriting the user's index;
- 2.13 `rev-parse --absolute-git-dir`, 2.11 `cat-file --filters`, 2.9 `core.hooksPath`.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

MIN_GIT_VERSION = (2, 25, 0)

# Snapshots and children's commits are made by coven-ls, under a fixed identity: they must work
# with no user.name/user.email configured, and should not be mistaken for the user's commits.
IDENTITY: Mapping[str, str] = {
    "GIT_AUTHOR_NAME": "coven-ls",
    "GIT_AUTHOR_EMAIL": "coven-ls@localhost",
    "GIT_COMMITTER_NAME": "coven-ls",
    "GIT_COMMITTER_EMAIL": "coven-ls@localhost",
}

# Seconds one git command may take. Generous: `git add -A` of a big working tree or a checkout
# through an LFS filter is slow, but a git that waits for something (a lock, a prompt) must not
# hang a fork for ever.
TIMEOUT = 300.0

# Variables that would point git at another repository, index or configuration than the one the
# command is about (`git rev-parse --local-env-vars`); coven-ls may itself run under a git hook.
_REPO_ENV = (
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_OBJECT_DIRECTORY",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_GRAFT_FILE",
    "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_PREFIX",
    "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_COMMON_DIR",
)

MODE_FILE, MODE_EXEC, MODE_LINK, MODE_GITLINK = "100644", "100755", "120000", "160000"


class GitError(Exception):
    """A git command failed, or a repository is not in a state an operation can work with. The
    message is a sentence that says what failed, git's own reason, and what to do."""

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.command = tuple(command)
        self.returncode = returncode
        self.stderr = stderr


def _environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
    # Read-only commands (diff, status) otherwise refresh and rewrite the index they read: the
    # user's index must not change, not even its stat cache.
    env["GIT_OPTIONAL_LOCKS"] = "0"
    # Never wait for a person: a credential or passphrase prompt would hang a fork.
    env["GIT_TERMINAL_PROMPT"] = "0"
    # Messages are parsed for a few known reasons ("not a git repository").
    env["LC_ALL"] = "C"
    env["LANGUAGE"] = "C"
    if extra:
        env.update(extra)
    return env


def git(
    cwd: str | os.PathLike[str],
    *args: str,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    ok: Iterable[int] = (0,),
    what: str | None = None,
    hint: str = "",
    timeout: float = TIMEOUT,
) -> subprocess.CompletedProcess[bytes]:
    """Run one git command in cwd and return it; raise GitError when it fails (exits with a
    code not in `ok`), its message saying `what` failed, git's reason and `hint`."""
    # The user's hooks are theirs: a post-checkout or reference-transaction hook has no business
    # running (slowly, or failing) on coven-ls's own bookkeeping.
    command = ["git", "-c", f"core.hooksPath={os.devnull}", *args]
    what = what or f"git {args[0]}"
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            env=_environment(env),
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        if not Path(cwd).is_dir():
            raise GitError(f"{what} failed: the folder {cwd} does not exist.") from exc
        raise GitError(
            f"{what} failed: git is not installed (no `git` on PATH). Install git "
            f"{version_text(MIN_GIT_VERSION)} or newer.",
            command=command,
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise GitError(
            f"{what} did not finish in {timeout:.0f} seconds and was stopped. Check that no "
            "other git command holds a lock on the repository and that git needs no input.",
            command=command,
        ) from exc
    if done.returncode not in tuple(ok):
        stderr = done.stderr.decode(errors="replace")
        raise GitError(
            failure(what, done.returncode, stderr, hint),
            command=command,
            returncode=done.returncode,
            stderr=stderr,
        )
    return done


def failure(what: str, code: int, stderr: str, hint: str) -> str:
    lines = [
        re.sub(r"^(fatal|error): ", "", ln.strip())
        for ln in stderr.splitlines()
        if ln.strip() and not ln.startswith(("hint:", "warning:"))
    ]
    reason = " ".join(lines[-3:]).rstrip(".") if lines else f"git exited with code {code}"
    return f"{what} failed: {reason}." + (f" {hint}" if hint else "")


def output(done: subprocess.CompletedProcess[bytes]) -> str:
    return done.stdout.decode(errors="surrogateescape").strip()


def revision(rev: str) -> str:
    """A revision as an argument: never one git could read as an option."""
    if not rev or rev.startswith("-"):
        raise GitError(f"'{rev}' is not a git revision.")
    return rev


def version_text(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


@functools.lru_cache(maxsize=8)
def git_version(executable: str) -> tuple[int, int, int] | None:
    """The version of the git at that path (cached per path: installs do not change under a
    running server), or None if it does not say one we can read."""
    done = subprocess.run(
        [executable, "--version"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env=_environment(),
        timeout=30,
        check=False,
    )
    found = re.search(rb"(\d+)\.(\d+)(?:\.(\d+))?", done.stdout)
    if done.returncode or not found:
        return None
    return int(found[1]), int(found[2]), int(found[3] or 0)


# Options for big trees, set on coven's own commands in coven's own worktrees only (`git -c`,
# never the user's configuration), each where the git at hand has it.
# - index.version=4 (git 2.0): prefix-compressed paths, an index a third smaller for deep trees,
#   so cheaper to read and write on every command. It applies to new index files: a worktree's
#   when `git worktree add` makes it.
# - core.untrackedCache=true (git 2.8): the index remembers which folders held no untracked files
#   (by their mtimes), so `git status` in the child (agents run it first thing) reads only the
#   folders that changed. Set when the worktree is made, the index keeps it; git's default
#   (`keep`) then uses it for every later command, the agent's and the user's alike.
UNTRACKED_CACHE_GIT = (2, 8, 0)
INDEX_V4_GIT = (2, 0, 0)
# - index.skipHash=true (git 2.40): the index is written without its trailing SHA-1 (tens of
#   milliseconds for a 100,000-file index, at each write and read). Risky for an index anyone
#   else reads: libgit2 (and so the editors and tools built on it) and go-git reject such an
#   index as corrupt, and so does any git before 2.40 (an editor's bundled one). So only for an
#   index no other tool ever sees: a snapshot's temporary index (`private_index_options`).
SKIP_HASH_GIT = (2, 40, 0)
# Not used: fsmonitor. git's own daemon (`core.fsmonitor=true`, 2.36) exists for macOS and
# Windows only ("fsmonitor--daemon not supported on this platform" on Linux, Debian's 2.39
# included); elsewhere it needs Watchman installed and a hook. Where it runs, it is a daemon per
# worktree, each watching every folder of a big tree (on Linux, inotify watches a user has a few
# thousand of by default), started by the first command and stopped only by `git fsmonitor--daemon
# stop` in that worktree: a pool's spares would keep one running each while they wait.


def worktree_options(version: tuple[int, int, int]) -> tuple[str, ...]:
    """`-c` options for commands that make or bring up-to-date coven's own worktrees."""
    options: list[str] = []
    if version >= INDEX_V4_GIT:
        options += ["-c", "index.version=4"]
    if version >= UNTRACKED_CACHE_GIT:
        options += ["-c", "core.untrackedCache=true"]
    return tuple(options)


def private_index_options(version: tuple[int, int, int]) -> tuple[str, ...]:
    """`-c` options for commands on a temporary index only coven-ls's own git reads."""
    return ("-c", "index.skipHash=true") if version >= SKIP_HASH_GIT else ()


def commit_tree(cwd: Path, tree: str, parent: str, message: str) -> str:
    # --no-gpg-sign: a commit.gpgSign setting must not make a fork wait for a passphrase.
    done = git(
        cwd,
        "commit-tree",
        "--no-gpg-sign",
        tree,
        "-p",
        parent,
        "-m",
        message,
        env=IDENTITY,
        what="Creating a commit",
    )
    return output(done)


def is_within(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or inside it, comparing the paths as given (resolve them first
    where links matter): where a worktree may go, where a merge may write."""
    return path == folder or folder in path.parents
