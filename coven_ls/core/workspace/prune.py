"""`coven-ls prune`: find, and remove, the worktrees and branches of fork children that no
session needs any more (a session deleted, a server killed half-way through a fork, a pool entry
left over), keeping the branches that hold work never applied unless told to discard it.

What is needed comes from every store in the state folder (read without taking its lock: a
server may be running): each stored session's worktree and every worktree a fork planned. What
is coven-ls's comes from git: branches under `coven/` and linked worktrees that are on one, or
that live in the state folder. A branch holds unapplied work when a deletion kept it for that
(the store's record says why), or, with no record, when its files differ from where it started
(its reflog's first entry; without a reflog, it is assumed to hold work: when in doubt, keep).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..store import StoredTrees, forget_kept_branches, read_trees
from . import pool, worktrees
from .git import GitError
from .repository import (
    COVEN_BRANCH_PREFIX,
    NotARepo,
    RepoInfo,
    branch_start,
    branches,
    delete_branch,
    inspect,
    same_tree,
)

log = logging.getLogger(__name__)

Action = Literal["remove", "keep", "failed"]


@dataclass
class Item:
    """One branch (with its worktree, if it has one) or one branchless worktree."""

    repository: str
    branch: str | None
    worktree: str | None
    unapplied: bool
    """it holds work never applied"""
    reason: str
    """why it is removable, or what it holds"""
    action: Action = "remove"
    """what prune does (or, with --dry-run, would do) with it"""
    error: str | None = None


@dataclass
class Report:
    items: list[Item] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """stores or repositories that could not be read (what they hold was left alone)"""
    dry_run: bool = False
    state_dir: Path | None = None
    """the state folder planned for (its pools' spares are removed only while no server uses
    them)"""

    def to_json(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "items": [asdict(i) for i in self.items],
            "problems": list(self.problems),
        }


def stores_in(state_dir: Path) -> list[Path]:
    return sorted(state_dir.glob("*.sqlite3"))


def plan(
    state_dir: Path, discard_work: bool = False, repositories: Iterable[str] = ()
) -> tuple[Report, dict[Path, StoredTrees]]:
    """What prune would do (nothing is changed): the report and what each store said."""
    report = Report(state_dir=state_dir)
    stored: dict[Path, StoredTrees] = {}
    for path in stores_in(state_dir):
        try:
            stored[path] = read_trees(path)
        except (sqlite3.Error, OSError, ValueError) as exc:
            report.problems.append(f"could not read {path} ({exc}): its worktrees were kept")
    named = {*repositories}
    needed_paths: set[str] = set()
    for trees in stored.values():
        named.update(n["repository"] for n in trees.needed)
        named.update(k["repository"] for k in trees.kept)
        needed_paths.update(os.path.realpath(n["path"]) for n in trees.needed)
    repos: dict[Path, RepoInfo] = {}
    by_name: dict[str, Path] = {}
    for name in sorted(named):
        try:
            found = inspect(name)
        except GitError as exc:
            report.problems.append(f"could not read the repository {name}: {exc.message}")
            continue
        if isinstance(found, NotARepo):
            continue  # gone, or no longer a repository: nothing of coven-ls's left in it
        repos.setdefault(found.common_dir, found)
        by_name[name] = found.common_dir
    needed: set[tuple[Path, str]] = set()
    kept: dict[tuple[Path, str], dict[str, Any]] = {}
    for trees in stored.values():
        for n in trees.needed:
            if n["repository"] in by_name:
                needed.add((by_name[n["repository"]], n["branch"]))
        for k in trees.kept:
            if k["repository"] in by_name:
                kept[(by_name[k["repository"]], k["branch"])] = k
    state = os.path.realpath(state_dir)
    for common, repo in repos.items():
        try:
            report.items.extend(
                _plan_repo(repo, common, needed, needed_paths, kept, state, discard_work)
            )
        except GitError as exc:
            report.problems.append(f"could not read the repository {repo.toplevel}: {exc.message}")
    return report, stored


def _plan_repo(
    repo: RepoInfo,
    common: Path,
    needed: set[tuple[Path, str]],
    needed_paths: set[str],
    kept: dict[tuple[Path, str], dict[str, Any]],
    state: str,
    discard_work: bool,
) -> list[Item]:
    items: list[Item] = []
    trees = worktrees.list_worktrees(repo)
    tree_of = {t.branch: t for t in trees if t.branch is not None}

    def in_state(path: Path) -> bool:
        where = os.path.realpath(path)
        return where == state or where.startswith(state.rstrip(os.sep) + os.sep)

    for branch, tip in sorted(branches(repo).items()):
        if (common, branch) in needed:
            continue
        tree = tree_of.get(branch)
        if tree is not None and os.path.realpath(tree.path) in needed_paths:
            continue
        if tree is not None and not in_state(tree.path):
            continue  # checked out by the user somewhere of theirs: theirs to delete
        record = kept.get((common, branch))
        if record is not None:
            unapplied, reason = True, f"kept when its session was deleted: {record['reason']}"
        else:
            start = branch_start(repo, branch)
            if start is None:
                unapplied, reason = True, "no session needs it; where it started is unknown"
            elif start == tip or same_tree(repo, start, tip):
                unapplied, reason = False, "no session needs it and it holds no work"
            else:
                unapplied, reason = True, "no session needs it; it holds work never applied"
        if unapplied and discard_work:
            reason += " (discarded: --discard-work)"
        items.append(
            Item(
                repository=str(repo.toplevel),
                branch=branch,
                worktree=str(tree.path) if tree is not None else None,
                unapplied=unapplied,
                reason=reason,
                action="keep" if unapplied and not discard_work else "remove",
            )
        )
    for tree in trees:
        # Worktrees in the state folder on no branch of coven-ls's (a pool's prepared ones, a
        # detached leftover) that no session uses.
        if tree.branch is not None and tree.branch.startswith(COVEN_BRANCH_PREFIX):
            continue
        if not in_state(tree.path) or os.path.realpath(tree.path) in needed_paths or tree.locked:
            continue
        folder = pool.pool_of(Path(state), tree.path)
        if folder is not None and pool.in_use(folder):
            continue  # a running server's spare: being made, ready to hand out, or being adopted
        items.append(
            Item(
                repository=str(repo.toplevel),
                branch=None,
                worktree=str(tree.path),
                unapplied=False,
                reason="a worktree in coven-ls's state folder that no session uses",
            )
        )
    return items


def apply(report: Report, stored: dict[Path, StoredTrees]) -> None:
    """Remove what the report says to remove; each failure is recorded on its item."""
    removed: set[tuple[str, str]] = set()
    for item in report.items:
        if item.action != "remove":
            continue
        try:
            found = inspect(item.repository)
            if isinstance(found, NotARepo):
                raise GitError(f"{item.repository} is {found.reason}")
            folder = None
            if item.worktree is not None and report.state_dir is not None:
                folder = pool.pool_of(report.state_dir, Path(item.worktree))
            if folder is not None:
                _remove_spare(found, item, folder)
            elif item.worktree is not None:
                worktrees.remove(
                    found, item.worktree, item.branch or "", keep_branch=item.branch is None
                )
                _remove_if_empty(Path(item.worktree).parent)
            elif item.branch is not None:
                delete_branch(found, item.branch)
            if item.branch is not None:
                removed.add((item.repository, item.branch))
        except (GitError, OSError) as exc:
            item.action = "failed"
            item.error = exc.message if isinstance(exc, GitError) else str(exc)
    _forget(stored, removed)


def _remove_spare(repo: RepoInfo, item: Item, folder: Path) -> None:
    """A pool's spare, removed only while no server uses its pool (one may have started since
    the plan): the pool is held meanwhile, so that none starts using it half way."""
    assert item.worktree is not None
    with pool.reserved(folder) as mine:
        if not mine:
            raise GitError(
                "a coven-ls server started using this worktree pool meanwhile: it was left to "
                "that server; run prune again once the server has stopped"
            )
        pool.discard_spare(repo, Path(item.worktree))


def _forget(stored: dict[Path, StoredTrees], removed: set[tuple[str, str]]) -> None:
    """Drop the store records of kept branches that are gone now."""
    for path, trees in stored.items():
        gone = [
            (k["repository"], k["branch"])
            for k in trees.kept
            if _same_repo_branch(k, removed) or not _branch_exists(k)
        ]
        if gone:
            try:
                forget_kept_branches(path, gone)
            except sqlite3.Error:
                log.warning("could not update %s", path, exc_info=True)


def _same_repo_branch(record: dict[str, Any], removed: set[tuple[str, str]]) -> bool:
    top = os.path.realpath(record["repository"])
    return any(b == record["branch"] and os.path.realpath(r) == top for r, b in removed)


def _branch_exists(record: dict[str, Any]) -> bool:
    try:
        found = inspect(record["repository"])
    except GitError:
        return True  # cannot tell: keep the record
    if isinstance(found, NotARepo):
        return False
    return record["branch"] in branches(found)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass  # other worktrees are in it, or it is gone already
