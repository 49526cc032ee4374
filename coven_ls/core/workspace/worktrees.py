"""A child's worktree over its life: made on its branch from the fork's snapshot (`create`, or
`prepare`d ahead and `adopt`ed), brought to a later snapshot (`reset_to`), made again after its
folder was deleted (`restore`), listed, measured, and removed with its temporary folder and,
unless its work is kept, its branch (`remove`, `prune`). The user's HEAD, index and working tree
are never changed; the repository gains and loses only worktree registrations and `coven/`
branches. Blocking: call from a worker thread."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .commits import copied_paths
from .git import GitError, git, is_within, output, revision, worktree_options
from .repository import COVEN_BRANCH_PREFIX, RepoInfo, delete_branch, resolve
from .submodules import checkout_submodules, remove_submodule_worktrees

log = logging.getLogger(__name__)


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


def create(repo: RepoInfo, snapshot: str, path: str | os.PathLike[str], branch: str) -> Worktree:
    """A new worktree at `path` (which must not exist, or be an empty folder, outside the
    repository: under coven-ls's state folder) on a new branch `branch` (such as
    `coven/<fork-id>/<n>-<slug>`) that starts at `snapshot`. The user's HEAD, index and working
    tree are untouched; the repository gains the branch and the worktree's registration."""
    where = Path(path).absolute()
    _check_place(repo, where, branch)
    where.parent.mkdir(parents=True, exist_ok=True)
    git(
        repo.toplevel,
        *worktree_options(repo.git_version),
        "worktree",
        "add",
        "--quiet",
        "-b",
        branch,
        str(where),
        revision(snapshot),
        what=f"Creating the worktree {where} on the branch {branch}",
        hint="`git worktree list` and `git branch --list 'coven/*'` show what already exists; a "
        "branch of that name must not.",
    )
    head = output(git(where, "rev-parse", "HEAD"))
    checkout_submodules(repo.toplevel, where, head)
    return Worktree(path=where, branch=branch, head=head)


def _check_place(repo: RepoInfo, where: Path, branch: str) -> None:
    """Raise unless a child's worktree can go to `where` on the new branch `branch`."""
    for outside in (repo.toplevel, repo.common_dir):
        if is_within(where.resolve(), outside.resolve()):
            raise GitError(
                f"Cannot create a child's worktree at {where}: it is inside {outside}, where the "
                "parent's snapshots would pick it up. Use a folder outside the repository."
            )
    if where.exists() and (not where.is_dir() or any(where.iterdir())):
        raise GitError(
            f"Cannot create a child's worktree at {where}: something is already there. Remove it "
            "or choose another folder."
        )
    valid = git(repo.toplevel, "check-ref-format", f"refs/heads/{branch}", ok=(0, 1))
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
    git(
        repo.toplevel,
        *worktree_options(repo.git_version),
        "worktree",
        "add",
        "--quiet",
        "--detach",
        str(where),
        revision(commit),
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
    files that differ between its commit and the snapshot are written (the index's stat cache,
    made with the files, stays valid through a folder rename). Whatever the spare holds beyond
    its commit (edited, untracked, ignored files: nothing writes there, but a tree handed to a
    child must be exactly the snapshot) is reset or removed, but for the `.worktreeinclude`
    copies the pool made in it (`record_copied`): those are the child's environment's to check
    and keep or replace (`worktree_env.reuse_kept`), never part of the snapshot. A spare whose
    index and tracked files are still its commit's (`unchanged`) is brought there with
    `read-tree -m -u`, which compares trees and touches only the paths that differ; one that
    was written into, with `checkout --force`, which checks every file. On failure it raises;
    the spare is then wherever the failure left it, at `spare` or at `path`, and both are the
    caller's to remove."""
    where = Path(path).absolute()
    _check_place(repo, where, branch)
    kept = copied_paths(spare)
    where.parent.mkdir(parents=True, exist_ok=True)
    if where.is_dir():
        where.rmdir()  # empty (checked): `worktree move` wants no folder there
    git(
        repo.toplevel,
        "worktree",
        "move",
        str(Path(spare).absolute()),
        str(where),
        what=f"Moving the prepared worktree {spare} to {where}",
    )
    # A spare may have waited days in the state folder: its tracked files are compared with
    # its index before the fast path trusts them (`untouched`).
    head = bring_to(
        where, snapshot, branch, kept, repo.git_version, new_branch=True, untouched=unchanged(where)
    )
    checkout_submodules(repo.toplevel, where, head)
    return Worktree(path=where, branch=branch, head=head)


def unchanged(worktree: Path) -> bool:
    """Whether a worktree's index and tracked files are exactly its HEAD's: nothing staged,
    edited, deleted or re-moded since git wrote them. Read-only (no index refresh, as every read
    here: `GIT_OPTIONAL_LOCKS=0`): a file whose stat data differs from the index's counts as
    changed even if its bytes are the same, which only sends it the slower, exact way. Untracked
    and ignored files are not looked at: `bring_to` cleans them either way."""
    done = git(
        worktree,
        "diff-index",
        "--quiet",
        "--no-ext-diff",
        "HEAD",
        "--",
        ok=(0, 1),
        what=f"Checking whether the worktree {worktree} was written into",
    )
    return done.returncode == 0


def reset_to(
    worktree: str | os.PathLike[str],
    branch: str,
    snapshot: str,
    version: tuple[int, int, int] = (0, 0, 0),
) -> None:
    """Bring a child's worktree made ahead of its fork (`adopt`ed or `create`d while the fork's
    approval was asked) to the fork's own snapshot, on its branch (reset to it): only the files
    that differ are written, and whatever else it holds is removed but for the
    `.worktreeinclude` copies (`record_copied`), which the child's environment checks.
    `version` is the repository's git (`RepoInfo.git_version`), for the options it has."""
    where = Path(worktree)
    # Made (or adopted, every file checked) moments ago for this fork, and no child has run in
    # it: nothing wrote its files since.
    bring_to(
        where, snapshot, branch, copied_paths(where), version, new_branch=False, untouched=True
    )


# How many times worktrees were brought to a snapshot by each path ("read-tree", the fast one, or
# "checkout", its fallback): for tests and the bench, which count what each path costs.
paths_taken: Counter[str] = Counter()


def bring_to(
    where: Path,
    snapshot: str,
    branch: str,
    kept: Sequence[str],
    version: tuple[int, int, int],
    *,
    new_branch: bool,
    untouched: bool,
) -> str:
    """Bring the worktree `where` to `snapshot` on `branch` (new, or reset to it), cleaned of
    everything else but the `kept` copies; return its HEAD.

    When the caller knows nothing wrote its tracked files since git last wrote them
    (`untouched`), a two-tree `read-tree -m -u HEAD <snapshot>`: git compares the two trees and
    looks at (and writes) only the paths that differ, where `checkout --force` lstats every
    file of the tree (100,000 of them in a big repository, each a disk read once the inodes
    have left the cache) to find files changed behind git's back. A changed path that was
    written anyway makes read-tree refuse ("not uptodate"): then, and when not `untouched`,
    `checkout --force`. `clean` removes whatever is untracked or ignored either way."""
    what = f"Bringing the worktree {where} to the fork's snapshot"
    tuned = worktree_options(version)
    target = output(git(where, "rev-parse", "--verify", f"{revision(snapshot)}^{{commit}}"))
    if untouched and _read_tree(where, tuned, target, branch, new_branch=new_branch, what=what):
        paths_taken["read-tree"] += 1
    else:
        git(
            where,
            *tuned,
            "checkout",
            "--quiet",
            "--force",
            "--no-recurse-submodules",
            "-b" if new_branch else "-B",
            branch,
            target,
            what=what,
        )
        head = output(git(where, "rev-parse", "HEAD", what=what))
        if head != target:
            raise GitError(f"The worktree {where} is at {head}, not at the snapshot {snapshot}.")
        paths_taken["checkout"] += 1
    spared = [f":(exclude,literal){p}" for p in kept]
    git(where, "clean", "-ffdxq", "--", ".", *spared, what=f"Cleaning the worktree {where}")
    return target


def _read_tree(
    where: Path, tuned: Sequence[str], target: str, branch: str, *, new_branch: bool, what: str
) -> bool:
    """`bring_to`'s fast path; False when git refused it (then `checkout --force` it is)."""
    ref = f"refs/heads/{branch}"
    message = f"coven-ls: {'branch' if new_branch else 'reset'}: to the fork's snapshot"
    try:
        git(where, *tuned, "read-tree", "-m", "-u", "HEAD", target, what=what)
        # An empty old value: the branch must not exist yet (as `checkout -b` demands).
        git(where, "update-ref", "-m", message, ref, target, *([""] if new_branch else []))
        git(where, "symbolic-ref", "-m", message, "HEAD", ref, what=what)
    except GitError:
        log.info("%s: read-tree refused, checking out every file", where, exc_info=True)
        return False
    return True


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
    out = git(
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
        remove_submodule_worktrees(where)
        git(
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
        git(repo.toplevel, "worktree", "remove", str(wt.path), what=f"Forgetting {wt.path}")
    where.parent.mkdir(parents=True, exist_ok=True)
    git(
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
        git(
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
