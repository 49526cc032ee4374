"""Git worktrees for forked children: every child of a fork works in a worktree of its own, on a
branch of its own, started from a snapshot of exactly what the parent sees; when it is done, its
changes are merged back into the parent's working tree as uncommitted edits.

Plain functions over the `git` command line (subprocess, blocking: call them from a worker
thread). The rule every function keeps: the user's HEAD, branches, index, stash and working tree
are never changed, except by `merge_into_worktree`, which writes working-tree files and nothing
else. Git objects are written freely (snapshots, children's commits, merge results): they are
invisible until something points at them and `git gc` collects the unreachable ones.

The flow, for one fork of a parent working in the repository `info = inspect(cwd)`:

    base = snapshot(info)                                    # once per fork
    child = create(info, base, state_dir / "wt" / "f1-1", "coven/f1/1-tests")
    ...                                                      # the child works in child.path
    commit_all(child.path, "coven: child 1")                 # its work, on its branch
    result = merge_into_worktree(info, base, child.branch)   # into the parent's working tree
    remove(info, child.path, child.branch, keep_branch=not result.ok)

Choices, and why:

- Submodules come from the parent's. Each submodule the parent has checked out is checked out
  in the child's worktree at the snapshot's commit, as a linked worktree (detached) of the
  parent's own submodule repository: no clone, no network, no change to any configuration, its
  objects shared (`checkout_submodules`). One the parent has not initialised stays an empty
  folder, as in the parent. A change a child makes to a submodule pointer is reported as
  skipped, never applied.
- Binary files and symbolic links are taken from the child only when the working tree still has
  the snapshot's version (or already has the child's); otherwise they are a conflict, as they
  cannot be merged line by line.
- Renames are detected (`-M`, git's default 50% similarity): a child's rename of a file the user
  edited meanwhile is merged, the user's edits moving to the new name.
- Executable bits are merged like a tiny file of their own: the side that changed it wins.
- Line endings and filters (`.gitattributes` text/eol/filter, `core.autocrlf`, Git LFS) are
  honoured: files are compared and merged in git's normalised form and written back as a
  checkout would write them.

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

import contextlib
import functools
import itertools
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

MIN_GIT_VERSION = (2, 25, 0)

# Branches of children live under this prefix (`coven/<fork-id>/<n>-<slug>`), which is how
# `list_coven_worktrees` tells them from the user's own worktrees.
COVEN_BRANCH_PREFIX = "coven/"

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

# Git's own test for a binary file (buffer_is_binary): a NUL in the first 8000 bytes.
_BINARY_PROBE = 8000

_MODE_FILE, _MODE_EXEC, _MODE_LINK, _MODE_GITLINK = "100644", "100755", "120000", "160000"

# The attributes that make a checked-out file differ from its blob (or `git add` change it).
_CONVERSION_ATTRS = ("text", "eol", "crlf", "filter", "ident", "working-tree-encoding")

# Temporary names for files being written, unique in this process; short, so that a long file
# name does not make them too long.
_TEMP_NUMBERS = itertools.count()


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


# --- results -----------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Worktree:
    """A linked worktree of the repository, as `git worktree list` reports it."""

    path: Path
    branch: str | None
    """the short branch name; None when detached"""
    head: str | None
    locked: bool = False
    missing: bool = False
    """its folder no longer exists (deleted by hand): `prune` forgets it"""


ChangeStatus = Literal["added", "modified", "deleted", "renamed"]


@dataclass(frozen=True)
class FileChange:
    """One file a child changed, between the fork's snapshot and the child's commit."""

    path: str
    """the path in the child's commit (for a deletion, the deleted path); relative, `/`"""
    status: ChangeStatus
    old_path: str | None
    """the path in the snapshot: the rename's source, else equal to `path`; None when added"""
    binary: bool
    lines_added: int
    """0 for binary files"""
    lines_removed: int
    old_mode: str | None
    """git's mode in the snapshot ("100644", "100755", "120000" link, "160000" submodule)"""
    new_mode: str | None
    old_blob: str | None
    new_blob: str | None
    similarity: int | None = None
    """for renames: git's similarity index, 0-100"""

    @property
    def submodule(self) -> bool:
        return _MODE_GITLINK in (self.old_mode, self.new_mode)


AppliedHow = Literal["child", "merged", "same"]


@dataclass(frozen=True)
class AppliedFile:
    """A change of the child that is now in the working tree."""

    path: str
    status: ChangeStatus
    old_path: str | None
    how: AppliedHow
    """"child": the working tree had the snapshot's version and now has the child's; "merged":
    the working tree had edits of its own, merged with the child's; "same": it already had the
    child's version"""
    lines_added: int
    lines_removed: int


@dataclass(frozen=True)
class Conflict:
    """A file whose working-tree version and child's version cannot both be kept."""

    path: str
    reason: str
    """a sentence fragment: "changed on the same lines in the working tree and by the child" """
    text: bytes | None = None
    """for a text conflict, the file with git's conflict markers (never written anywhere)"""


@dataclass(frozen=True)
class Skipped:
    """A change that is never applied (a submodule's commit), with why."""

    path: str
    reason: str


@dataclass(frozen=True)
class MergeResult:
    """A child's merge: all of it was applied (`conflicts` empty), or none of it."""

    applied: tuple[AppliedFile, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    skipped: tuple[Skipped, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.conflicts

    @property
    def lines_added(self) -> int:
        return sum(f.lines_added for f in self.applied)

    @property
    def lines_removed(self) -> int:
        return sum(f.lines_removed for f in self.applied)


# --- running git -------------------------------------------------------------------------------


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


def _git(
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
            f"{_version_text(MIN_GIT_VERSION)} or newer.",
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
            _failure(what, done.returncode, stderr, hint),
            command=command,
            returncode=done.returncode,
            stderr=stderr,
        )
    return done


def _failure(what: str, code: int, stderr: str, hint: str) -> str:
    lines = [
        re.sub(r"^(fatal|error): ", "", ln.strip())
        for ln in stderr.splitlines()
        if ln.strip() and not ln.startswith(("hint:", "warning:"))
    ]
    reason = " ".join(lines[-3:]).rstrip(".") if lines else f"git exited with code {code}"
    return f"{what} failed: {reason}." + (f" {hint}" if hint else "")


def _out(done: subprocess.CompletedProcess[bytes]) -> str:
    return done.stdout.decode(errors="surrogateescape").strip()


def _rev(rev: str) -> str:
    """A revision as an argument: never one git could read as an option."""
    if not rev or rev.startswith("-"):
        raise GitError(f"'{rev}' is not a git revision.")
    return rev


def _version_text(version: tuple[int, int, int]) -> str:
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


# --- inspect -----------------------------------------------------------------------------------


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
            f"git {_version_text(version)} is too old (need ≥ {_version_text(MIN_GIT_VERSION)})",
        )
    if not where.is_dir():
        return NotARepo(where, "the folder does not exist")

    done = _git(where, "rev-parse", "--is-inside-work-tree", ok=(0, 128))
    if done.returncode:
        stderr = done.stderr.decode(errors="replace")
        if "not a git repository" in stderr:
            return NotARepo(where, "not a git repository")
        if "dubious ownership" in stderr:
            return NotARepo(where, "git refuses the repository: it belongs to another user")
        return NotARepo(where, _failure("git rev-parse", 128, stderr, "").removesuffix("."))
    if _out(done) != "true":
        return NotARepo(where, "inside a git folder or a bare repository, not a work tree")

    top, git_dir, common = _out(
        _git(where, "rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir")
    ).splitlines()
    toplevel = Path(top)
    head = _git(toplevel, "rev-parse", "-q", "--verify", "HEAD^{commit}", ok=(0, 1))
    if head.returncode:
        return NotARepo(where, "the repository has no commits yet")
    branch = _git(toplevel, "symbolic-ref", "-q", "--short", "HEAD", ok=(0, 1))
    return RepoInfo(
        toplevel=toplevel,
        git_dir=Path(git_dir),
        common_dir=(where / common).resolve(),  # relative to where rev-parse ran
        head=_out(head),
        branch=_out(branch) or None,
        submodules=_submodules(toplevel),
        git_version=version,
    )


def _submodules(toplevel: Path) -> tuple[str, ...]:
    """The paths the index records as submodules (gitlinks), whether or not .gitmodules names
    them and whether or not they are initialised."""
    listing = _git(toplevel, "ls-files", "--stage", "-z").stdout
    found = []
    for record in listing.split(b"\0"):
        info, _, path = record.partition(b"\t")
        if info.startswith(_MODE_GITLINK.encode() + b" "):
            found.append(os.fsdecode(path))
    return tuple(dict.fromkeys(found))  # a conflicted submodule has several stages


# --- snapshot ----------------------------------------------------------------------------------


def snapshot(repo: RepoInfo) -> str:
    """A commit of exactly what the parent sees in its working tree, for children to start from:
    HEAD plus staged and unstaged changes (deletions and renames included) plus untracked files
    that .gitignore does not exclude, with executable bits, symbolic links and binary files.
    The user's index, HEAD, branches and stash are untouched: the commit is built in a temporary
    index and pointed at by nothing. A clean working tree gives HEAD itself."""
    top = repo.toplevel
    head = _out(_git(top, "rev-parse", "--verify", "HEAD^{commit}", what="Reading HEAD"))
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
        plain = ("-c", "core.splitIndex=false", "-c", "core.sparseCheckout=false")
        user_index = repo.git_dir / "index"
        if user_index.is_file():
            shutil.copy2(user_index, index)
            _clear_hiding_flags(top, env, plain)
        else:
            _git(top, *plain, "read-tree", "HEAD", env=env, what="Snapshotting the working tree")
        _git(top, *plain, "add", "-A", env=env, what="Snapshotting the working tree", hint=hint)
        tree = _out(_git(top, *plain, "write-tree", env=env, what="Snapshotting the working tree"))
    if tree == _out(_git(top, "rev-parse", f"{head}^{{tree}}")):
        return head
    return _commit_tree(top, tree, head, "coven-ls: snapshot of the working tree for a fork")


def _clear_hiding_flags(top: Path, env: Mapping[str, str], plain: Sequence[str]) -> None:
    """In the temporary index, clear the assume-unchanged and skip-worktree bits: they make
    `git add` look away from a file's working-tree state, and the snapshot is that state. (One
    update-index command per flag: it applies only one of them per run.)"""
    listing = _git(top, *plain, "ls-files", "-v", "-z", env=env).stdout
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
            _git(
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


def _commit_tree(cwd: Path, tree: str, parent: str, message: str) -> str:
    # --no-gpg-sign: a commit.gpgSign setting must not make a fork wait for a passphrase.
    done = _git(
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
    return _out(done)


# --- create, commit_all ------------------------------------------------------------------------


def create(repo: RepoInfo, snapshot: str, path: str | os.PathLike[str], branch: str) -> Worktree:
    """A new worktree at `path` (which must not exist, or be an empty folder, outside the
    repository: under coven-ls's state folder) on a new branch `branch` (such as
    `coven/<fork-id>/<n>-<slug>`) that starts at `snapshot`. The user's HEAD, index and working
    tree are untouched; the repository gains the branch and the worktree's registration."""
    where = Path(path).absolute()
    _check_place(repo, where, branch)
    where.parent.mkdir(parents=True, exist_ok=True)
    _git(
        repo.toplevel,
        "worktree",
        "add",
        "--quiet",
        "-b",
        branch,
        str(where),
        _rev(snapshot),
        what=f"Creating the worktree {where} on the branch {branch}",
        hint="`git worktree list` and `git branch --list 'coven/*'` show what already exists; a "
        "branch of that name must not.",
    )
    head = _out(_git(where, "rev-parse", "HEAD"))
    checkout_submodules(repo.toplevel, where, head)
    return Worktree(path=where, branch=branch, head=head)


def _check_place(repo: RepoInfo, where: Path, branch: str) -> None:
    """Raise unless a child's worktree can go to `where` on the new branch `branch`."""
    for outside in (repo.toplevel, repo.common_dir):
        if _is_within(where.resolve(), outside.resolve()):
            raise GitError(
                f"Cannot create a child's worktree at {where}: it is inside {outside}, where the "
                "parent's snapshots would pick it up. Use a folder outside the repository."
            )
    if where.exists() and (not where.is_dir() or any(where.iterdir())):
        raise GitError(
            f"Cannot create a child's worktree at {where}: something is already there. Remove it "
            "or choose another folder."
        )
    valid = _git(repo.toplevel, "check-ref-format", f"refs/heads/{branch}", ok=(0, 1))
    if valid.returncode or branch.startswith("-"):
        raise GitError(f"Cannot create the branch '{branch}': it is not a valid branch name.")


def prepare(repo: RepoInfo, path: str | os.PathLike[str], commit: str) -> Path:
    """A spare worktree at `path` (which must not exist), detached at `commit`, on no branch:
    made ahead of a fork, to become a child's worktree at once (`adopt`). Its files are written
    now, while the server idles, instead of on the fork's path."""
    where = Path(path).absolute()
    if where.exists():
        raise GitError(f"Cannot prepare a worktree at {where}: something is already there.")
    where.parent.mkdir(parents=True, exist_ok=True)
    _git(
        repo.toplevel,
        "worktree",
        "add",
        "--quiet",
        "--detach",
        str(where),
        _rev(commit),
        what=f"Preparing the worktree {where}",
    )
    return where


def adopt(
    repo: RepoInfo,
    spare: str | os.PathLike[str],
    snapshot: str,
    path: str | os.PathLike[str],
    branch: str,
) -> Worktree:
    """Make the spare worktree `spare` (from `prepare`) a child's worktree: moved to `path` and
    brought to `snapshot` on the new branch `branch`, as `create` would have made it. Only the
    files that differ between its commit and the snapshot are written (`checkout -f` compares
    trees; the index's stat cache, made with the files, stays valid through a folder rename).
    Whatever the spare holds beyond its commit (edited, untracked, ignored files: nothing
    writes there, but a tree handed to a child must be exactly the snapshot) is reset or
    removed, but for the `.worktreeinclude` copies the pool made in it (`record_copied`): those
    are the child's environment's to check and keep or replace (`worktree_env.reuse_kept`),
    never part of the snapshot. On failure it raises; the spare is then wherever the failure
    left it, at `spare` or at `path`, and both are the caller's to remove."""
    where = Path(path).absolute()
    _check_place(repo, where, branch)
    kept = copied_paths(spare)
    where.parent.mkdir(parents=True, exist_ok=True)
    if where.is_dir():
        where.rmdir()  # empty (checked): `worktree move` wants no folder there
    _git(
        repo.toplevel,
        "worktree",
        "move",
        str(Path(spare).absolute()),
        str(where),
        what=f"Moving the prepared worktree {spare} to {where}",
    )
    _git(
        where,
        "checkout",
        "--quiet",
        "--force",
        "--no-recurse-submodules",
        "-b",
        branch,
        _rev(snapshot),
        what=f"Bringing the worktree {where} to the fork's snapshot",
    )
    spared = [f":(exclude,literal){p}" for p in kept]
    _git(where, "clean", "-ffdxq", "--", ".", *spared, what=f"Cleaning the worktree {where}")
    head = _out(_git(where, "rev-parse", "HEAD"))
    if head != _out(_git(where, "rev-parse", f"{_rev(snapshot)}^{{commit}}")):
        raise GitError(f"The worktree {where} is at {head}, not at the snapshot {snapshot}.")
    checkout_submodules(repo.toplevel, where, head)
    return Worktree(path=where, branch=branch, head=head)


def reset_to(worktree: str | os.PathLike[str], branch: str, snapshot: str) -> None:
    """Bring a child's worktree made ahead of its fork (`adopt`ed or `create`d while the fork's
    approval was asked) to the fork's own snapshot, on its branch (reset to it): only the files
    that differ are written, and whatever else it holds is removed but for the
    `.worktreeinclude` copies (`record_copied`), which the child's environment checks."""
    where = Path(worktree)
    what = f"Bringing the worktree {where} to the fork's snapshot"
    _git(
        where,
        "checkout",
        "--quiet",
        "--force",
        "--no-recurse-submodules",
        "-B",
        branch,
        _rev(snapshot),
        what=what,
    )
    spared = [f":(exclude,literal){p}" for p in copied_paths(where)]
    _git(where, "clean", "-ffdxq", "--", ".", *spared, what=what)
    head = _out(_git(where, "rev-parse", "HEAD", what=what))
    if head != _out(_git(where, "rev-parse", f"{_rev(snapshot)}^{{commit}}", what=what)):
        raise GitError(f"The worktree {where} is at {head}, not at the snapshot {snapshot}.")


def checkout_submodules(source: Path, worktree: Path, commit: str) -> list[str]:
    """Check out in `worktree` (a new worktree at `commit`) every submodule that the work tree
    `source` has checked out, at the commit `commit` records for it, as a detached linked
    worktree of `source`'s submodule repository (nested submodules too). Returns the paths
    checked out. A submodule whose recorded commit its repository lacks (the pointer was moved
    past what was fetched) stays an empty folder, and is logged: a child is better off without
    it than without a worktree."""
    found: list[str] = []
    for sub in _submodules(source):
        origin = source / sub
        if not (origin / ".git").exists():
            continue  # not initialised in the parent: empty there, so empty here
        entry = _out(_git(worktree, "ls-tree", "-z", _rev(commit), "--", sub)).rstrip("\0")
        info, _, _name = entry.partition("\t")
        fields = info.split()
        if len(fields) != 3 or fields[0] != _MODE_GITLINK:
            continue
        target = worktree / sub
        try:
            _git(
                origin,
                "worktree",
                "add",
                "--quiet",
                "--detach",
                str(target),
                _rev(fields[2]),
                what=f"Checking out the submodule {sub} in {worktree}",
            )
        except GitError as exc:
            log.warning("%s", exc.message)
            continue
        found.append(sub)
        found.extend(f"{sub}/{p}" for p in checkout_submodules(origin, target, fields[2]))
    return found


def _remove_submodule_worktrees(worktree: Path) -> None:
    """Unregister the submodule worktrees `checkout_submodules` made in a child's worktree (from
    the parent's submodule repositories), innermost first, so that none stays registered."""
    if not (worktree / ".git").is_file():
        return
    try:
        subs = _submodules(worktree)
    except GitError:
        return  # not a usable work tree any more: `git worktree prune` forgets its leftovers
    for sub in subs:
        target = worktree / sub
        if not (target / ".git").is_file():
            continue
        _remove_submodule_worktrees(target)
        try:
            _git(target, "worktree", "remove", "--force", str(target))
        except GitError as exc:
            log.warning("%s", exc.message)


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
    # Excluding an ignored path makes `git add` fail ("paths are ignored"): only those the
    # child un-ignored need it.
    ignored = set()
    if known:
        done = _git(
            where,
            "check-ignore",
            "-z",
            "--stdin",
            input=b"".join(os.fsencode(p) + b"\0" for p in known),
            ok=(0, 1),
            what=what,
        )
        ignored = {os.fsdecode(p) for p in done.stdout.split(b"\0") if p}
    excluded = [f":(exclude,literal){p}" for p in known if p not in ignored]
    hint = "Check that its files are readable."
    _git(where, "add", "-A", "--", ".", *excluded, what=what, hint=hint)
    if copied:
        _git(where, "rm", "-r", "--cached", "-q", "--ignore-unmatch", "--", *copied, what=what)
    tree = _out(_git(where, "write-tree", what=what))
    head = _out(_git(where, "rev-parse", "--verify", "HEAD^{commit}", what=what))
    if tree == _out(_git(where, "rev-parse", f"{head}^{{tree}}", what=what)):
        return None
    commit = _commit_tree(where, tree, head, message)
    # Compare-and-swap on the old value: a commit the child makes at this very moment is not lost.
    _git(where, "update-ref", "-m", "coven-ls: commit_all", "HEAD", commit, head, what=what)
    return commit


COPIED_RECORD = "coven-copied"
"""in a worktree's own git folder: the paths copied into it from the parent (one a line)"""


def own_git_dir(worktree: Path) -> Path:
    found = _out(_git(worktree, "rev-parse", "--absolute-git-dir", what="Reading the worktree"))
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


# --- changes, show -----------------------------------------------------------------------------


def changes(repo: RepoInfo, base: str, commit: str) -> list[FileChange]:
    """The files that differ between `base` (a fork's snapshot) and `commit` (a child's commit or
    branch), renames detected, with +/- line counts; in git's path order."""
    top = repo.toplevel
    what = f"Comparing {base} with {commit}"
    spec = ("diff-tree", "-r", "-z", "-M", "--no-abbrev", "--no-ext-diff")
    raw = _git(top, *spec, "--raw", _rev(base), _rev(commit), "--", what=what).stdout
    counts = _git(top, *spec, "--numstat", _rev(base), _rev(commit), "--", what=what).stdout

    numstat: dict[tuple[str, str], tuple[int | None, int | None]] = {}
    fields = counts.split(b"\0")
    i = 0
    while i < len(fields) - 1:
        added, removed, path = fields[i].split(b"\t", 2)
        if path:  # "+\t-\tpath"
            old = new = os.fsdecode(path)
            i += 1
        else:  # a rename: "+\t-\t", source, destination
            old, new = os.fsdecode(fields[i + 1]), os.fsdecode(fields[i + 2])
            i += 3
        numstat[(old, new)] = (
            None if added == b"-" else int(added),
            None if removed == b"-" else int(removed),
        )

    found: list[FileChange] = []
    fields = raw.split(b"\0")
    i = 0
    while i < len(fields) - 1:
        old_mode, new_mode, old_blob, new_blob, letter = fields[i][1:].decode().split(" ")
        if letter[0] in "RC":
            old, new = os.fsdecode(fields[i + 1]), os.fsdecode(fields[i + 2])
            i += 3
        else:
            old = new = os.fsdecode(fields[i + 1])
            i += 2
        kind = letter[0]
        plus, minus = numstat.get((old, new), (0, 0))
        status: ChangeStatus = (
            "added"
            if kind == "A"
            else "deleted"
            if kind == "D"
            else "renamed"
            if kind == "R"
            else "modified"  # M, and T (a type change: file <-> link)
        )
        if kind == "C":  # only with -C, which is not asked for: a copy is an addition
            status, kind = "added", "A"
        found.append(
            FileChange(
                path=new,
                status=status,
                old_path=None if kind == "A" else old,
                binary=plus is None,
                lines_added=plus or 0,
                lines_removed=minus or 0,
                old_mode=None if kind == "A" else old_mode,
                new_mode=None if kind == "D" else new_mode,
                old_blob=None if kind == "A" else old_blob,
                new_blob=None if kind == "D" else new_blob,
                similarity=int(letter[1:]) if kind == "R" and letter[1:] else None,
            )
        )
    return found


def resolve(repo: RepoInfo, rev: str) -> str:
    """The commit a revision (a branch, say) names."""
    return _out(
        _git(
            repo.toplevel, "rev-parse", "--verify", f"{_rev(rev)}^{{commit}}", what=f"Reading {rev}"
        )
    )


def show(repo: RepoInfo, rev: str, path: str) -> bytes | None:
    """The content of `path` (relative to the top, `/`-separated) in `rev`, as git stores it (a
    link's target, for a symbolic link); None when `rev` has no file there."""
    query = f"{_rev(rev)}:{path}".encode(errors="surrogateescape")
    if b"\n" in query:
        return None
    out = _git(repo.toplevel, "cat-file", "--batch", input=query + b"\n").stdout
    header, _, rest = out.partition(b"\n")
    parts = header.split(b" ")
    if len(parts) != 3 or parts[1] != b"blob":
        return None  # "<query> missing", or a tree or a submodule's commit
    return rest[: int(parts[2])]


def _read_blobs(top: Path, oids: Iterable[str]) -> dict[str, bytes]:
    """Blob contents, as stored (no filters), in one `git cat-file --batch`."""
    wanted = list(dict.fromkeys(oids))
    if not wanted:
        return {}
    out = _git(top, "cat-file", "--batch", input="".join(f"{o}\n" for o in wanted).encode()).stdout
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


# --- merge -------------------------------------------------------------------------------------


StateKind = Literal["missing", "file", "link", "dir", "other", "submodule"]


@dataclass(frozen=True)
class _State:
    """One path's state: in a commit, or on disk."""

    kind: StateKind
    executable: bool = False
    oid: str | None = None  # a file's blob, in git's normalised form
    target: bytes | None = None  # a link's target


_MISSING = _State("missing")


@dataclass
class _Final:
    """What the merge writes at one path."""

    kind: Literal["file", "link"]
    data: bytes  # for a file, as it goes on disk (filters applied); for a link, its target
    executable: bool = False


@dataclass
class _Plan:
    writes: dict[str, _Final] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    applied: list[AppliedFile] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    seen: dict[str, tuple[int, int, int, int] | None] = field(default_factory=dict)


def merge_into_worktree(
    repo: RepoInfo, base: str, commit: str, *, label: str = "child", attempts: int = 3
) -> MergeResult:
    """Merge a child's changes (from `base`, the fork's snapshot, to `commit`, its commit or
    branch) into the user's working tree as it is now (with the user's own edits since the
    fork, and children merged before), as uncommitted changes. HEAD, branches, the index and the
    stash do not change. All or nothing: when any file conflicts, nothing is written and the
    result lists the conflicts (the child's branch keeps its work); else every change is written
    and listed. `label` names the child in conflict markers.

    Per file: a working file that still equals the snapshot takes the child's version; one that
    already equals the child's is left alone; text files both sides changed are merged three-way
    (`git merge-file`), overlapping edits being a conflict; anything else both changed (binary
    files, links, a change against a deletion) is a conflict."""
    found = changes(repo, base, commit)
    for _ in range(max(1, attempts)):
        plan = _plan(repo, found, label)
        if plan.conflicts:
            return MergeResult(conflicts=tuple(plan.conflicts), skipped=tuple(plan.skipped))
        # The user (or their editor) may have saved a file since it was read: plan again rather
        # than overwrite that save.
        if all(_stat(repo.toplevel / p) == s for p, s in plan.seen.items()):
            _apply(repo.toplevel, plan)
            return MergeResult(applied=tuple(plan.applied), skipped=tuple(plan.skipped))
    raise GitError(
        f"Could not merge {commit}: files in the working tree kept changing while it was merged. "
        "Try again when they are saved."
    )


def _plan(repo: RepoInfo, found: Sequence[FileChange], label: str) -> _Plan:
    """Everything the merge of `found` would write, or its conflicts; reads, writes nothing in
    the working tree."""
    top = repo.toplevel
    plan = _Plan()
    config = _core_config(top)
    filemode = config.get("core.filemode", "true") != "false"

    # The snapshot's and the child's state of every path they touch; a path both deleted and
    # added (a rename's source re-created) has both sides.
    base_of: dict[str, _State] = {}
    child_of: dict[str, _State] = {}
    links: list[str] = []
    relevant: list[FileChange] = []
    for ch in found:
        if ch.submodule:
            plan.skipped.append(
                Skipped(
                    ch.path,
                    "a submodule: children do not get submodules checked out, so a change of "
                    "its commit is not applied",
                )
            )
            continue
        relevant.append(ch)
        if ch.old_path is not None and ch.old_mode and ch.old_blob:
            base_of[ch.old_path] = _tree_state(ch.old_mode, ch.old_blob)
            links += [ch.old_blob] if ch.old_mode == _MODE_LINK else []
        if ch.status != "deleted" and ch.new_mode and ch.new_blob:
            child_of[ch.path] = _tree_state(ch.new_mode, ch.new_blob)
            links += [ch.new_blob] if ch.new_mode == _MODE_LINK else []
    targets = _read_blobs(top, links)
    for states in (base_of, child_of):
        for p, s in states.items():
            if s.kind == "link" and s.oid:
                states[p] = _State("link", target=targets[s.oid])

    paths = sorted(set(base_of) | set(child_of))
    for p in paths:
        _safe_path(p)
    now = _disk_states(top, paths, plan.seen)
    filtered = _filtered_paths(top, paths, config)

    # A path's final state, when it changes: None for "delete".
    final: dict[str, _State | None] = {}
    merged_text: dict[str, bytes] = {}  # clean bytes of three-way merged files
    how: dict[str, AppliedHow] = {}

    def same(a: _State, b: _State) -> bool:
        if a.kind != b.kind:
            return False
        if a.kind == "file":
            return a.oid == b.oid and (a.executable == b.executable or not filemode)
        if a.kind == "link":
            return a.target == b.target
        return a.kind == "missing"

    def conflict(path: str, reason: str, text: bytes | None = None) -> None:
        plan.conflicts.append(Conflict(path, reason, text))

    def three_way(ch: FileChange, ours_at: str, base: _State, child: _State) -> None:
        """Merge the working file at `ours_at` with the child's change base -> child, into
        ch.path."""
        ours = now[ours_at]
        if not (ours.kind == base.kind == child.kind == "file"):
            conflict(ch.path, _type_clash(ours, base, child))
            return
        mine = _clean_bytes(top, ours_at, ours_at in filtered)
        executable = child.executable if ours.executable == base.executable else ours.executable
        executable = executable if filemode else child.executable
        if base.oid == child.oid:  # the child changed only the executable bit
            final[ch.path] = _State("file", executable)
            merged_text[ch.path] = mine
            how[ch.path] = "merged"
            return
        assert base.oid and child.oid
        blobs = _read_blobs(top, [base.oid, child.oid])
        texts = (mine, blobs[base.oid], blobs[child.oid])
        if ch.binary or any(b"\0" in t[:_BINARY_PROBE] for t in texts):
            conflict(ch.path, "a binary file changed both in the working tree and by the child")
            return
        text, clashes = _merge_file(top, texts, label)
        if clashes:
            conflict(
                ch.path, "changed on the same lines in the working tree and by the child", text
            )
            return
        final[ch.path] = _State("file", executable)
        merged_text[ch.path] = text
        how[ch.path] = "merged"

    handled: set[str] = set()
    for ch in relevant:
        # A rename whose source path the child fills again is left to the per-path rules.
        if ch.status != "renamed" or ch.old_path is None or ch.old_path in child_of:
            continue
        old, new = ch.old_path, ch.path
        mine, base, child = now[old], base_of[old], child_of[new]
        if not same(now[new], base_of.get(new, _MISSING)) and not same(now[new], child):
            continue  # the destination was changed in the working tree: decided per path below
        handled.update((old, new))
        if same(mine, base):  # the plain case: the rename (and its edits) as the child made it
            final[new], how[new], final[old] = child, "child", None
        elif mine.kind == "missing":
            if same(now[new], child):
                how[new] = "same"
            else:
                conflict(old, f"deleted in the working tree but renamed to {new} by the child")
        else:  # the user edited the file the child renamed: their edits move along
            three_way(ch, old, base, child)
            final[old] = None

    for p in paths:
        if p in handled:
            continue
        mine, base, child = now[p], base_of.get(p, _MISSING), child_of.get(p, _MISSING)
        if mine.kind == "dir" and base.kind == "missing" and _emptied(top, p, base_of, child_of):
            mine = _MISSING  # a folder whose every file the child deletes, for a file of this name
        if same(mine, base):
            final[p], how[p] = (None if child.kind == "missing" else child), "child"
        elif same(mine, child):
            how[p] = "same"
        elif mine.kind == "missing":
            conflict(p, "deleted in the working tree but changed by the child")
        elif child.kind == "missing":
            conflict(p, "changed in the working tree but deleted by the child")
        elif base.kind == "missing":
            what = "a folder" if mine.kind == "dir" else "a different file"
            conflict(p, f"created by the child, but the working tree has {what} there")
        else:
            ch = next(c for c in relevant if c.path == p)
            three_way(ch, p, base, child)

    # Writing through a link, or into what is now a file, would put the child's file elsewhere
    # (unless the merge deletes that file first).
    written = [p for p, state in final.items() if state is not None]
    folders = sorted({parent for p in written for parent in _parents(p)} - set(now))
    now.update(_disk_states(top, folders, plan.seen))
    for p in written:
        for parent in _parents(p):
            if (
                now[parent].kind not in ("dir", "missing")
                and final.get(parent, _MISSING) is not None
            ):
                conflict(p, f"the working tree has a file or a symbolic link at {parent}")
                break
    if plan.conflicts:
        return plan

    # Contents as they go on disk: child blobs and merge results through the checkout filters.
    need = [s.oid for p, s in final.items() if s and s.kind == "file" and p not in merged_text]
    blobs = _read_blobs(top, [o for o in need if o])
    for p, state in final.items():
        if state is None:
            plan.deletes.append(p)
        elif state.kind == "link":
            assert state.target is not None
            plan.writes[p] = _Final("link", state.target)
        else:
            if p in merged_text:
                data = _to_worktree(top, p, None, merged_text[p], p in filtered)
            else:
                assert state.oid
                data = _to_worktree(top, p, state.oid, blobs[state.oid], p in filtered)
            plan.writes[p] = _Final("file", data, state.executable)

    for ch in relevant:
        decided = how.get(ch.path) or how.get(ch.old_path or "")
        plan.applied.append(
            AppliedFile(
                path=ch.path,
                status=ch.status,
                old_path=ch.old_path,
                how=decided or "child",
                lines_added=ch.lines_added,
                lines_removed=ch.lines_removed,
            )
        )
    return plan


def _tree_state(mode: str, oid: str) -> _State:
    if mode == _MODE_LINK:
        return _State("link", oid=oid)  # its target is read in the same batch as the others
    if mode == _MODE_GITLINK:
        return _State("submodule", oid=oid)
    return _State("file", executable=mode == _MODE_EXEC, oid=oid)


def _type_clash(ours: _State, base: _State, child: _State) -> str:
    kinds = {"file": "a file", "link": "a symbolic link", "dir": "a folder", "other": "not a file"}
    if "link" in (ours.kind, base.kind, child.kind):
        return (
            "changed both in the working tree and by the child, and a symbolic link cannot be "
            "merged"
        )
    return f"changed both in the working tree and by the child (it is {kinds.get(ours.kind, '?')})"


def _safe_path(path: str) -> None:
    """Git never stores such paths; a damaged or hostile commit could."""
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
        raise GitError(f"The child's commit has a path git should not allow: {path!r}.")


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _stat(path: Path) -> tuple[int, int, int, int] | None:
    """What tells a changed file from the one that was read: its type and permissions, size,
    modification time and inode (an editor may save by renaming a new file over it). For a
    folder only that it is one: files appearing in it (the user's build) do not matter."""
    try:
        st = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return (stat.S_IFDIR, 0, 0, 0)
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)


def _disk_states(
    top: Path, paths: Sequence[str], seen: dict[str, tuple[int, int, int, int] | None]
) -> dict[str, _State]:
    """The working tree's state of each path, regular files hashed as `git add` would hash
    them (filters applied) in one `git hash-object`. Records what it saw in `seen`."""
    states: dict[str, _State] = {}
    files: list[str] = []
    for p in paths:
        full = top / p
        seen[p] = _stat(full)
        mode = seen[p]
        if mode is None:
            states[p] = _MISSING
        elif stat.S_ISREG(mode[0]):
            states[p] = _State("file", executable=bool(mode[0] & stat.S_IXUSR))
            files.append(p)
        elif stat.S_ISLNK(mode[0]):
            states[p] = _State("link", target=os.readlink(os.fsencode(full)))
        elif stat.S_ISDIR(mode[0]):
            states[p] = _State("dir")
        else:
            states[p] = _State("other")
    for p, oid in zip(files, _hash_files(top, files), strict=True):
        states[p] = _State("file", executable=states[p].executable, oid=oid)
    return states


def _hash_files(top: Path, paths: Sequence[str], write: bool = False) -> list[str]:
    flags = ["-w"] if write else []
    plain = [p for p in paths if "\n" not in p]
    ids: dict[str, str] = {}
    if plain:
        out = _git(
            top,
            "hash-object",
            *flags,
            "--stdin-paths",
            input="".join(f"{p}\n" for p in plain).encode(errors="surrogateescape"),
            what="Reading the working tree",
        )
        ids.update(zip(plain, _out(out).splitlines(), strict=True))
    for p in paths:  # --stdin-paths cannot name a path with a newline in it
        if p not in ids:
            ids[p] = _out(_git(top, "hash-object", *flags, "--", p))
    return [ids[p] for p in paths]


def _core_config(top: Path) -> dict[str, str]:
    out = _git(
        top, "config", "-z", "--get-regexp", r"^core\.(autocrlf|filemode)$", ok=(0, 1)
    ).stdout
    found: dict[str, str] = {}
    for record in out.split(b"\0"):
        key, _, value = record.decode(errors="replace").partition("\n")
        if key:
            found[key.lower()] = value.strip().lower()
    return found


def _filtered_paths(top: Path, paths: Sequence[str], config: Mapping[str, str]) -> set[str]:
    """The paths whose working-tree bytes may differ from their blob's (eol conversion, a
    filter such as Git LFS, ident, an encoding): they go through git both ways. The others are
    read and written as they are, without a git command per file."""
    if config.get("core.autocrlf", "false") in ("true", "input", "yes", "on", "1"):
        return set(paths)
    if not paths:
        return set()
    out = _git(
        top,
        "check-attr",
        "-z",
        "--stdin",
        *_CONVERSION_ATTRS,
        input=b"".join(os.fsencode(p) + b"\0" for p in paths),
    ).stdout.split(b"\0")
    found: set[str] = set()
    for i in range(0, len(out) - 2, 3):
        if out[i + 2] not in (b"unspecified", b"unset"):
            found.add(os.fsdecode(out[i]))
    return found


def _clean_bytes(top: Path, path: str, filtered: bool) -> bytes:
    """A working file's content as git would store it."""
    if not filtered:
        return (top / path).read_bytes()
    (oid,) = _hash_files(top, [path], write=True)
    return _read_blobs(top, [oid])[oid]


def _to_worktree(top: Path, path: str, oid: str | None, clean: bytes, filtered: bool) -> bytes:
    """Content in git's form as a checkout of `path` would write it."""
    if not filtered:
        return clean
    if oid is None:  # stored as is: it is already in git's form
        oid = _out(_git(top, "hash-object", "-w", "--stdin", input=clean))
    return _git(top, "cat-file", "--filters", f"--path={path}", oid).stdout


def _merge_file(top: Path, texts: tuple[bytes, bytes, bytes], label: str) -> tuple[bytes, int]:
    """`git merge-file` of (ours, base, theirs): the merged text and the number of conflicting
    hunks. merge-file only takes files, so the three go through a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="coven-merge-") as scratch:
        names = []
        for name, text in zip(("ours", "base", "theirs"), texts, strict=True):
            (Path(scratch) / name).write_bytes(text)
            names.append(str(Path(scratch) / name))
        done = _git(
            top,
            "merge-file",
            "-p",
            "-L",
            "working tree",
            "-L",
            "fork snapshot",
            "-L",
            label,
            *names,
            ok=range(0, 128),
            what="Merging a file",
        )
    return done.stdout, done.returncode


def _emptied(
    top: Path, folder: str, base_of: Mapping[str, _State], child_of: Mapping[str, _State]
) -> bool:
    """Whether every file in the working tree's `folder` is one the child deletes unchanged, so
    that the folder goes away and a file can take its name."""
    for dirpath, dirnames, filenames in os.walk(top / folder):
        if not dirnames and not filenames:
            return False  # an empty folder would stay
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in filenames + links:
            rel = (Path(dirpath) / name).relative_to(top).as_posix()
            if rel not in base_of or rel in child_of:
                return False
    return True


def _apply(top: Path, plan: _Plan) -> None:
    """Write the plan: deletions first (a file may give its name to a folder, or the other way),
    then files, each through a temporary file and a rename so that no one reads half a file.
    When a write fails, what was already changed is put back, then GitError."""
    undo: list[tuple[str, bytes | None, int | None, bool]] = []  # path, content, mode, link
    made: list[Path] = []

    def remember(p: str) -> None:
        full = top / p
        st = _stat(full)
        if st is None:
            undo.append((p, None, None, False))
        elif stat.S_ISLNK(st[0]):
            undo.append((p, os.readlink(os.fsencode(full)), None, True))
        elif stat.S_ISREG(st[0]):
            undo.append((p, full.read_bytes(), stat.S_IMODE(st[0]), False))

    try:
        for p in plan.deletes:
            remember(p)
            (top / p).unlink(missing_ok=True)
        for p in plan.deletes:
            _remove_empty_parents(top, p)
        for p, item in sorted(plan.writes.items()):
            remember(p)
            _write(top, p, item, made)
    except OSError as exc:
        for p, content, mode, link in reversed(undo):
            with contextlib.suppress(OSError):
                _restore(top / p, content, mode, link)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise GitError(
            f"Could not write {exc.filename or 'a file'} in the working tree ({exc.strerror}); "
            "the files already written were put back. Check the folder's permissions and free "
            "space, then merge again."
        ) from exc


def _write(top: Path, path: str, item: _Final, made: list[Path]) -> None:
    full = top / path
    missing = [d for d in full.parents if not d.exists() and _is_within(d, top)]
    for folder in reversed(missing):
        folder.mkdir()
        made.append(folder)
    temp = full.with_name(f".coven-{os.getpid()}-{next(_TEMP_NUMBERS)}.tmp")
    if item.kind == "link":
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        os.symlink(os.fsdecode(item.data), temp)
        os.replace(temp, full)
        return
    old = _stat(full)
    # A new file gets 0666 or 0777 less the umask, as a checkout; an existing one keeps its
    # permissions, its executable bits following the merge.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o777 if item.executable else 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(item.data)
        if old is not None and stat.S_ISREG(old[0]):
            perm = stat.S_IMODE(old[0])
            perm = perm | (perm & 0o444) >> 2 if item.executable else perm & ~0o111
            os.chmod(temp, perm)
        os.replace(temp, full)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _restore(full: Path, content: bytes | None, mode: int | None, link: bool) -> None:
    if full.is_symlink() or full.is_file():
        full.unlink()
    if content is None:
        return
    if link:
        os.symlink(os.fsdecode(content), full)
        return
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(content)
    if mode is not None:
        os.chmod(full, mode)


def _remove_empty_parents(top: Path, path: str) -> None:
    """As a checkout does: a folder left empty by a deletion goes too."""
    for folder in (top / path).parents:
        if folder == top or not _is_within(folder, top):
            return
        try:
            folder.rmdir()
        except OSError:
            return


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


# --- remove, prune, list, disk usage -----------------------------------------------------------


def list_coven_worktrees(repo: RepoInfo, prefix: str = COVEN_BRANCH_PREFIX) -> list[Worktree]:
    """The repository's linked worktrees whose branch is under `prefix` (children's), with
    whether their folder still exists."""
    return [
        wt for wt in _list_worktrees(repo) if wt.branch is not None and wt.branch.startswith(prefix)
    ]


def list_worktrees(repo: RepoInfo) -> list[Worktree]:
    """Every linked worktree of the repository (the main one too), with whether its folder
    still exists."""
    return _list_worktrees(repo)


def _list_worktrees(repo: RepoInfo) -> list[Worktree]:
    # -z (git 2.36) keeps paths with unusual characters intact; before it, one per line.
    z = repo.git_version >= (2, 36, 0)
    out = _git(
        repo.toplevel, "worktree", "list", "--porcelain", *(["-z"] if z else [])
    ).stdout.decode(errors="surrogateescape")
    found: list[Worktree] = []
    for block in out.split("\0\0" if z else "\n\n"):
        attrs: dict[str, str] = {}
        for line in block.split("\0" if z else "\n"):
            key, _, value = line.partition(" ")
            if key:
                attrs[key] = value
        if "worktree" not in attrs:
            continue
        path = Path(attrs["worktree"])
        branch = attrs.get("branch")
        found.append(
            Worktree(
                path=path,
                branch=branch.removeprefix("refs/heads/") if branch else None,
                head=attrs.get("HEAD"),
                locked="locked" in attrs,
                missing=not path.exists(),
            )
        )
    return found


TEMP_SUFFIX = ".tmp"


def temp_folder(path: str | os.PathLike[str]) -> Path:
    """The private temporary folder of the child working in the worktree at `path` (an agent
    whose sandbox writes only its worktree needs one for `mktemp`, pip, test runners): beside
    the worktree in coven-ls's state folder, so neither in the worktree's tracked tree nor in,
    or above, the parent's repository. A child's folder is `<n>-<slug>`, so no other child's
    worktree can be named like it. It goes with the worktree (`remove`)."""
    return Path(os.fspath(path) + TEMP_SUFFIX).absolute()


def remove(
    repo: RepoInfo, path: str | os.PathLike[str], branch: str, keep_branch: bool = False
) -> None:
    """Delete a child's worktree (its folder, with whatever is in it: commit_all first to keep
    its work) and its registration, its temporary folder, and its branch unless `keep_branch` (a
    child whose merge conflicted keeps its work there). A folder already deleted by hand, or a
    branch already gone, is fine."""
    where = Path(path).absolute()
    shutil.rmtree(temp_folder(where), ignore_errors=True)  # scratch only: nothing to keep
    registered = {wt.path.resolve() for wt in _list_worktrees(repo)}
    if where.resolve() in registered:
        _remove_submodule_worktrees(where)
        _git(
            repo.toplevel,
            "worktree",
            "remove",
            "--force",
            str(where),
            what=f"Removing the worktree {where}",
            hint="If it is locked, `git worktree unlock` it first.",
        )
    elif where.exists():
        raise GitError(
            f"{where} is not a worktree of {repo.toplevel}: not removing it. Delete the folder "
            "by hand if it is a child's leftover."
        )
    if not keep_branch:
        delete_branch(repo, branch)


def delete_branch(repo: RepoInfo, branch: str) -> None:
    """Delete one of coven-ls's branches (a branch already gone is fine)."""
    ref = f"refs/heads/{branch}"
    if not _git(repo.toplevel, "rev-parse", "-q", "--verify", ref, ok=(0, 1)).returncode:
        _git(
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
    trees = _git(
        repo.toplevel,
        "rev-parse",
        f"{_rev(a)}^{{tree}}",
        f"{_rev(b)}^{{tree}}",
        what="Reading trees",
    )
    first, second = _out(trees).splitlines()
    return first == second


def branches(repo: RepoInfo, prefix: str = COVEN_BRANCH_PREFIX) -> dict[str, str]:
    """The repository's branches under `prefix`, each with the commit it points at."""
    out = _git(
        repo.toplevel,
        "for-each-ref",
        "--format=%(refname:short)%00%(objectname)",
        f"refs/heads/{prefix.rstrip('/')}/",
    )
    found: dict[str, str] = {}
    for line in _out(out).splitlines():
        name, _, commit = line.partition("\0")
        if name.startswith(prefix):
            found[name] = commit
    return found


def branch_start(repo: RepoInfo, branch: str) -> str | None:
    """The commit a branch was created at, from its reflog (None when it has none: reflogs off,
    or expired): for a child's branch, the fork's snapshot."""
    done = _git(
        repo.toplevel,
        "reflog",
        "show",
        "--format=%H",
        f"refs/heads/{branch}",
        "--",
        ok=(0, 128),
    )
    lines = _out(done).splitlines() if not done.returncode else []
    return lines[-1] if lines else None


def restore(repo: RepoInfo, path: str | os.PathLike[str], branch: str) -> Worktree:
    """Make a child's worktree again at `path`, on its existing branch `branch`, after its folder
    was deleted (by hand, or by a clean-up of the state folder): the child's committed work is
    back; what it had not committed is lost with the folder."""
    where = Path(path).absolute()
    stale = [wt for wt in _list_worktrees(repo) if wt.path == where or wt.branch == branch]
    for wt in stale:
        if wt.path.exists():
            raise GitError(
                f"Cannot make the worktree {where} again: the branch {branch} is checked out in "
                f"{wt.path}."
            )
        _git(repo.toplevel, "worktree", "remove", str(wt.path), what=f"Forgetting {wt.path}")
    where.parent.mkdir(parents=True, exist_ok=True)
    _git(
        repo.toplevel,
        "worktree",
        "add",
        "--quiet",
        str(where),
        branch,
        what=f"Making the worktree {where} again on the branch {branch}",
        hint=f"`git branch --list '{branch}'` shows whether the branch still exists.",
    )
    head = resolve(repo, branch)
    checkout_submodules(repo.toplevel, where, head)
    return Worktree(path=where, branch=branch, head=head)


def prune(repo: RepoInfo, prefix: str = COVEN_BRANCH_PREFIX) -> list[Worktree]:
    """Forget children's worktrees whose folder was deleted by hand and return them; their
    branches stay (delete them with `remove(..., keep_branch=False)` if their work is not
    wanted). Only worktrees on `prefix` branches: unlike `git worktree prune`, it never forgets
    one of the user's own worktrees that lives on a drive that is not mounted right now."""
    gone = [wt for wt in list_coven_worktrees(repo, prefix) if wt.missing and not wt.locked]
    for wt in gone:
        _git(
            repo.toplevel,
            "worktree",
            "remove",
            str(wt.path),
            what=f"Forgetting the deleted worktree {wt.path}",
        )
    return gone


def disk_usage(worktree: str | os.PathLike[str]) -> int:
    """Bytes a worktree takes on disk, as `du --exclude=.git` counts them (blocks of its files
    and folders, links not followed), leaving out `.git`: what a child's worktree costs beyond
    the shared objects. File sizes would understate it many times over for a tree of small
    files, each of which takes at least a block."""

    def walk(folder: str, top: bool) -> int:
        total = 0
        try:
            with os.scandir(folder) as found:
                listed = list(found)
        except OSError:
            return 0  # gone meanwhile, or unreadable
        for entry in listed:
            if top and entry.name == ".git":
                continue  # a linked worktree's .git (a file pointing at its git folder)
            with contextlib.suppress(OSError):
                total += entry.stat(follow_symlinks=False).st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    total += walk(entry.path, False)
        return total

    root = os.fspath(worktree)
    with contextlib.suppress(OSError):
        return os.lstat(root).st_blocks * 512 + walk(root, True)
    return 0
